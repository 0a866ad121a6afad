/**
 * Before db:copy writes anything: the key the PostgreSQL nodes will run with opens the channel keys and 2FA secrets
 * the SQLite gateway sealed. The copy moves them sealed; nodes with another SECRET_KEY skip every channel key they
 * cannot open and refuse every 2FA code, and nothing said so until requests failed.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { parseSecretKey } from '@gw/config';
import { SecretBox } from '@gw/core';
import type { DbHandle } from '@gw/db';

/** Where the key was found, for messages. */
type KeySource = 'SECRET_KEY' | string;

/**
 * The key: SECRET_KEY (what the nodes are started with), else the SQLite gateway's own key file beside the
 * database (what it used without SECRET_KEY). Throws when sealed values exist and no key is found or none of
 * them opens with it; returns a warning naming those that do not open when only some fail (sealed under an
 * older key, already unusable on SQLite), else null.
 */
export function checkSealedKey(dbPath: string, src: DbHandle, env: Record<string, string | undefined>): string | null {
  const sealed = sealedValues(src);
  if (!sealed.length) return null;
  const file = join(dirname(dbPath), 'secret.key');
  let key: Uint8Array;
  let from: KeySource;
  if (env.SECRET_KEY?.trim()) {
    key = parseSecretKey(env.SECRET_KEY.trim());
    from = 'SECRET_KEY';
  } else if (existsSync(file)) {
    key = parseSecretKey(readFileSync(file, 'utf8').trim());
    from = file;
  } else {
    throw new Error(`${sealed.length} channel key(s) and 2FA secret(s) are sealed with the SQLite gateway's key, and neither SECRET_KEY nor ${file} is there to check it: run the copy with SECRET_KEY set to that key, the one the nodes will use`);
  }
  const box = new SecretBox(key);
  const closed = sealed.filter((s) => !opens(box, s.value)).map((s) => s.what);
  if (!closed.length) return null;
  const named = `${closed.slice(0, 5).join(', ')}${closed.length > 5 ? `, … (${closed.length})` : ''}`;
  if (closed.length === sealed.length) {
    throw new Error(`no sealed value opens with ${from} (${named}): it is not the key the SQLite gateway used, and nodes with it would skip every channel key and refuse every 2FA code; run the copy with SECRET_KEY set to the old key (without SECRET_KEY the gateway used ${file})`);
  }
  return `warning: ${closed.length} of ${sealed.length} sealed values do not open with ${from} (${named}): they were sealed under another key and are unusable on SQLite as well; set them again after the move`;
}

function opens(box: SecretBox, value: string): boolean {
  try { box.open(value); return true; } catch { return false; }
}

/** Every sealed value of the database, named for a message. */
function sealedValues(src: DbHandle): { what: string; value: string }[] {
  const out: { what: string; value: string }[] = [];
  const channels = src.sqlite.query('select id, key, keys from channels order by id').all() as { id: number; key: string; keys: string }[];
  for (const c of channels) {
    const entries = (JSON.parse(c.keys || '[]') as { id: number; key: string }[]);
    // A channel without a key list holds its one key in `key` (keyEntries in @gw/channels).
    for (const e of entries.length ? entries : [{ id: 1, key: c.key }]) out.push({ what: `channel ${c.id} key ${e.id}`, value: e.key });
  }
  const users = src.sqlite.query(`select id, totp_secret from users where totp_secret is not null and totp_secret != '' order by id`).all() as { id: number; totp_secret: string }[];
  for (const u of users) out.push({ what: `user ${u.id} 2FA secret`, value: u.totp_secret });
  return out;
}
