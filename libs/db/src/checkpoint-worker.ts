/**
 * Worker thread that checkpoints the WAL on its own connection. A checkpoint copies pages into the
 * database file and fsyncs it; done by SQLite's auto-checkpoint it runs inside whichever commit
 * crossed the threshold, i.e. on the request thread, adding milliseconds to that request.
 */
import { Database } from 'bun:sqlite';

declare const self: Worker;

self.onmessage = (ev: MessageEvent<{ path: string; intervalMs: number }>) => {
  const db = new Database(ev.data.path);
  db.exec('PRAGMA busy_timeout = 5000');
  const timer = setInterval(() => {
    try {
      db.exec('PRAGMA wal_checkpoint(PASSIVE)');
    } catch {
      // Busy or closing: the next tick tries again; the main connection's auto-checkpoint is the backstop.
    }
  }, ev.data.intervalMs);
  self.onmessage = () => { clearInterval(timer); db.close(); self.postMessage('closed'); };
};
