/**
 * A real SMTP server (the `smtp-server` package) inside the test process, on a random port. It
 * captures every delivered message so tests can read what the gateway e-mailed.
 */
import { SMTPServer } from 'smtp-server';

export interface CapturedMail {
  /** Envelope sender and recipients (what the SMTP client sent in MAIL FROM / RCPT TO). */
  from: string;
  to: string[];
  subject: string;
  /** The decoded text body. */
  text: string;
  raw: string;
  /** The user name the client authenticated as, if any. */
  authUser?: string;
}

export interface TestSmtp {
  port: number;
  messages: CapturedMail[];
  /** Gateway environment pointing at this server. */
  env: Record<string, string>;
  /** Resolves with the first captured message (already received or arriving) matching `pred`. */
  waitFor(pred: (m: CapturedMail) => boolean, timeoutMs?: number): Promise<CapturedMail>;
  stop(): Promise<void>;
}

/**
 * Starts the server; with `auth` it requires that user name and password (plain AUTH without TLS); with `delayMs`
 * it acknowledges each message that long after receiving it (a slow mail server).
 */
export async function startSmtp(auth?: { user: string; password: string }, opts: { delayMs?: number } = {}): Promise<TestSmtp> {
  const messages: CapturedMail[] = [];
  const waiters = new Set<() => void>();
  const server = new SMTPServer({
    // No TLS in tests: nodemailer would otherwise upgrade with STARTTLS to a self-signed certificate.
    disabledCommands: auth ? ['STARTTLS'] : ['STARTTLS', 'AUTH'],
    authOptional: !auth,
    allowInsecureAuth: true,
    logger: false,
    onAuth(a, _session, cb) {
      if (auth && a.username === auth.user && a.password === auth.password) return cb(null, { user: a.username });
      return cb(new Error('Invalid username or password'));
    },
    onData(stream, session, cb) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const raw = Buffer.concat(chunks).toString('utf8');
        const { headers, body } = parseMessage(raw);
        messages.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : '',
          to: session.envelope.rcptTo.map((r) => r.address),
          subject: headers.subject ?? '', text: body, raw,
          authUser: typeof session.user === 'string' ? session.user : undefined,
        });
        for (const w of waiters) w();
        if (opts.delayMs) setTimeout(() => cb(), opts.delayMs);
        else cb();
      });
    },
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  const port = (server.server.address() as { port: number }).port;
  return {
    port, messages,
    env: {
      SMTP_HOST: '127.0.0.1', SMTP_PORT: String(port), SMTP_SECURE: 'false', MAIL_FROM: 'Gateway <gateway@test.local>',
      ...(auth ? { SMTP_USER: auth.user, SMTP_PASSWORD: auth.password } : {}),
    },
    waitFor(pred, timeoutMs = 3000) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const m = messages.find(pred);
          if (!m) return false;
          waiters.delete(check);
          clearTimeout(timer);
          resolve(m);
          return true;
        };
        const timer = setTimeout(() => { waiters.delete(check); reject(new Error(`no matching mail within ${timeoutMs} ms (got ${messages.length})`)); }, timeoutMs);
        if (!check()) waiters.add(check);
      });
    },
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Enough MIME for single-part text mail: headers, and a 7bit / quoted-printable / base64 body. */
function parseMessage(raw: string): { headers: Record<string, string>; body: string } {
  const split = raw.indexOf('\r\n\r\n');
  const head = split < 0 ? raw : raw.slice(0, split);
  let body = split < 0 ? '' : raw.slice(split + 4);
  const headers: Record<string, string> = {};
  for (const line of head.replace(/\r\n[ \t]+/g, ' ').split('\r\n')) {
    const i = line.indexOf(':');
    if (i > 0) headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  const enc = (headers['content-transfer-encoding'] ?? '').toLowerCase();
  if (enc === 'quoted-printable') {
    body = body.replace(/=\r\n/g, '');
    body = Buffer.from(body.replace(/=([0-9A-Fa-f]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16))), 'latin1').toString('utf8');
  } else if (enc === 'base64') {
    body = Buffer.from(body.replace(/\s/g, ''), 'base64').toString('utf8');
  }
  return { headers, body: body.replace(/\r\n/g, '\n') };
}
