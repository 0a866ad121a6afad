/**
 * E-mails the owner of an account when something that outlives a login session changes on it: a new relay
 * key or access token, a relay key revived or given more reach (key-widening.ts), 2FA turned on or off, a new
 * password (also by a reset link), a new e-mail address (told to the old one). A stolen session can still
 * create or widen relay keys without the password; this is how the owner hears of it.
 *
 * Mail goes out after the response, through a bounded background queue (like reset e-mails). A burst is
 * not a burst of e-mails: the first notice of a user goes out at once, and the ones that follow within
 * the window are gathered into one digest at its end. Nothing is dropped to throttle, so a thief's key
 * created right after the owner's own is still reported.
 */
import { readBoolEnv, readIntEnv } from '@gw/config';
import { stdLogger, type Logger } from '@gw/core';
import type { UserRow } from '@gw/db';
import { JobQueue, type JobQueueOptions } from './job-queue';
import type { Mailer } from './mailer';

export interface SecurityNoticesConfig {
  /** SECURITY_NOTICES (default on): send them at all (only when SMTP is configured and the user has an e-mail). */
  enabled: boolean;
  /** SECURITY_NOTICE_WINDOW_SECONDS (default 60): notices after a user's first are gathered this long. */
  windowMs: number;
  /** PUBLIC_URL, named in the mail so the owner knows where to act. */
  publicUrl: string;
}

export function securityNoticesConfig(env: Record<string, string | undefined>, publicUrl: string): SecurityNoticesConfig {
  return {
    enabled: readBoolEnv(env, 'SECURITY_NOTICES', true),
    windowMs: readIntEnv(env, 'SECURITY_NOTICE_WINDOW_SECONDS', 60, 1, 86_400) * 1000,
    publicUrl,
  };
}

export type NoticeKind = 'relay_key_created' | 'relay_key_enabled' | 'relay_key_widened' | 'access_token_created' | 'two_factor_enabled'
  | 'two_factor_disabled' | 'two_factor_guessing' | 'two_factor_login_guessing' | 'password_changed' | 'password_reset' | 'email_changed';

export interface Notice {
  kind: NoticeKind;
  /** The key's or token's name and id, the new address: shown as data, on one line. */
  detail?: string;
  /** Who did it; named only when not the owner (an admin). */
  actor?: Pick<UserRow, 'id' | 'username'>;
  ip?: string;
  userAgent?: string;
  /** Where to write instead of the user's current address (an e-mail change tells the old one). */
  to?: string;
  /**
   * What the line is about (`relay key 12`), for a full digest: its first line about each thing is kept over
   * repeats about one thing (see Window). Unset: the kind itself (2FA off, the password, the address).
   */
  subject?: string;
}

const WHAT: Record<NoticeKind, string> = {
  relay_key_created: 'A new relay API key was created',
  relay_key_enabled: 'A disabled or expired relay API key was made usable again',
  relay_key_widened: 'A relay API key was given more reach',
  access_token_created: 'A new management access token was created',
  two_factor_enabled: 'Two-factor authentication was turned on',
  two_factor_disabled: 'Two-factor authentication was turned off',
  two_factor_guessing: 'Wrong two-factor codes were tried until the limit stopped them, by someone already signed in to your account (further tries are blocked for a while)',
  two_factor_login_guessing: 'Wrong two-factor codes were tried at login with your password until today\'s limit stopped them: someone else knows your password (logins with an authenticator code are blocked for the day; a backup code still works)',
  password_changed: 'The password was changed',
  password_reset: 'The password was reset with a link e-mailed to this address',
  email_changed: 'The e-mail address was changed',
};

/** A detail's length: a key's quoted name (100) and everything that can widen on it at once (about 1,200, bounded by keyWidening) fit. */
const DETAIL_MAX = 1_600;
/** Lines kept per digest; a longer burst is counted, not listed, so one user's flood cannot grow memory. */
const DIGEST_LINES = 50;
/**
 * Of a full digest, which line gives way to a new one (the one given way is counted in "and N more"): the newest
 * line of the thing (key, token, kind of change) with the most lines, while the new line's thing has fewer; else,
 * for a thing not yet listed, the newest line about a new relay key (rank 0: a session alone can make any number,
 * and each is listed when the digest has room). Else the new line is the one counted.
 */
const rank = (kind: NoticeKind) => (kind === 'relay_key_created' ? 0 : 1);
/** Open windows (user and address) at once; beyond it a notice is logged instead of mailed. */
const MAX_OPEN_WINDOWS = 10_000;

interface Line { text: string; subject: string; rank: number }
/**
 * A user's open digest. A thief cannot bury a line past the cap with cheap ones: raising one junk key's limit by one,
 * sixty times over, fills the digest with lines about that one key, which give way to lines about any other (so a
 * key widened a little, then flooded past, then widened for real, has both lines listed); new keys made by the
 * dozen give way to any line about something else. Burying needs 50 other things changed in the window, all listed.
 */
interface Window { userId: number; to: string; username: string; lines: Line[]; more: number; timer: ReturnType<typeof setTimeout> }

export class SecurityNotices {
  private readonly queue: JobQueue;
  /**
   * One window per user and address: after an e-mail change the new address gets its own window instead of
   * one mail per notice until the old address's window ends.
   */
  private readonly windows = new Map<string, Window>();

  constructor(
    private readonly mailer: Mailer,
    private readonly cfg: SecurityNoticesConfig,
    private readonly log: Logger = stdLogger,
    private readonly clock: () => number = Date.now,
    queueOptions: Omit<JobQueueOptions, 'log'> = {},
  ) {
    this.queue = new JobQueue({ ...queueOptions, log });
  }

  /** Tells `user` of `notice`; returns at once. Without SMTP, an address or `SECURITY_NOTICES`, nothing happens. */
  notify(user: Pick<UserRow, 'id' | 'username' | 'email'>, notice: Notice): void {
    const to = notice.to ?? user.email;
    if (!this.cfg.enabled || !this.mailer.configured || !to) return;
    const line = this.describe(notice, user.id);
    const key = `${user.id} ${to}`;
    const open = this.windows.get(key);
    if (open) {
      gather(open, { text: line, subject: notice.subject ?? notice.kind, rank: rank(notice.kind) });
      return;
    }
    if (this.windows.size >= MAX_OPEN_WINDOWS) {
      this.log.warn('notice.dropped', { user_id: user.id, kind: notice.kind, reason: 'too many open windows' });
      return;
    }
    this.send(user.id, to, user.username, [line], 0, WHAT[notice.kind]);
    const w: Window = { userId: user.id, to, username: user.username, lines: [], more: 0, timer: setTimeout(() => this.close(key), this.cfg.windowMs) };
    w.timer.unref?.();
    this.windows.set(key, w);
  }

  /** Resolves once queued notices are sent (tests). */
  idle(): Promise<void> { return this.queue.idle(); }

  /**
   * Stops notices. With `graceMs` (a graceful stop), every digest gathered so far is sent now rather than at its
   * window's end, and queued mail gets that long to go out: a restart inside a window no longer swallows the lines
   * gathered in it (a thief's key made right after the owner's). Without, or past it, what is left is logged as
   * not sent.
   */
  async stop(graceMs = 0): Promise<void> {
    const open = [...this.windows.keys()];
    for (const w of this.windows.values()) clearTimeout(w.timer);
    if (graceMs > 0) for (const key of open) this.close(key, false);
    const gathered = [...this.windows.values()].reduce((n, w) => n + w.lines.length + w.more, 0);
    if (gathered) this.log.warn('notice.not_sent', { notices: gathered });
    this.windows.clear();
    await this.queue.close(graceMs);
  }

  /** The window's end: a digest of what was gathered, and (`reopen`) a new window after it; none when nothing was. */
  private close(key: string, reopen = true): void {
    const w = this.windows.get(key);
    if (!w) return;
    if (!w.lines.length || !reopen) this.windows.delete(key);
    if (!w.lines.length) return;
    const n = w.lines.length + w.more;
    this.send(w.userId, w.to, w.username, w.lines.map((l) => l.text), w.more, `${n} changes to your account`);
    w.lines = [];
    w.more = 0;
    if (!reopen) return;
    w.timer = setTimeout(() => this.close(key), this.cfg.windowMs);
    w.timer.unref?.();
  }

  private send(userId: number, to: string, username: string, lines: string[], more: number, subject: string): void {
    const text = [
      `Hello ${oneLine(username)},`,
      '',
      `On your gateway account "${oneLine(username)}" (${this.cfg.publicUrl}):`,
      '',
      ...lines.map((l) => `- ${l}`),
      ...(more ? [`- and ${more} more`] : []),
      '',
      'Names in quotes (of keys, tokens, models) and User-Agents were chosen by whoever made the change: they may imitate',
      'another key\'s name or read like an instruction. A key is the one with the id shown next to its name.',
      '',
      'If this was you, there is nothing to do.',
      'If not, someone else can act on your account: change your password (this ends every other login session',
      'and access token), then review your relay keys and access tokens and delete the ones you do not know',
      '(gw key list, gw access-token list), and check your two-factor settings.',
    ].join('\n');
    this.queue.enqueue('security notice e-mail', async () => {
      await this.mailer.send({ to, subject: `Security notice: ${subject}`, text });
      this.log.info('notice.sent', { user_id: userId, notices: lines.length + more });
    });
  }

  /** An actor who is the owner is not named: "by admin" is for someone else acting on the account. */
  private describe(n: Notice, ownerId: number): string {
    const parts = [`${WHAT[n.kind]}${n.detail ? `: ${oneLine(n.detail, DETAIL_MAX)}` : ''}`, `at ${new Date(this.clock()).toISOString().replace('.000Z', 'Z')}`];
    if (n.actor && n.actor.id !== ownerId) parts.push(`by admin "${oneLine(n.actor.username)}" (user ${n.actor.id})`);
    if (n.ip) parts.push(`from ${oneLine(n.ip)}`);
    if (n.userAgent) parts.push(`User-Agent "${oneLine(n.userAgent)}"`);
    return parts.join(', ');
  }
}

/** Adds `line` to a digest; when full, it takes the place of the newest line that gives way to it (see rank), if any. */
function gather(w: Window, line: Line): void {
  if (w.lines.length < DIGEST_LINES) { w.lines.push(line); return; }
  w.more++;
  const count = new Map<string, number>();
  for (const l of w.lines) count.set(l.subject, (count.get(l.subject) ?? 0) + 1);
  let top = '';
  let most = 0;
  for (const [subject, c] of count) if (c > most) { top = subject; most = c; }
  const mine = count.get(line.subject) ?? 0;
  let out = -1;
  // The thing with the most lines gives one up, while this line's thing would still have fewer after.
  if (most >= 2 && mine + 1 < most) out = w.lines.findLastIndex((l) => l.subject === top);
  else if (mine === 0) out = w.lines.findLastIndex((l) => l.rank < line.rank);
  if (out < 0) return;
  w.lines.splice(out, 1);
  w.lines.push(line);
}

/**
 * A key's or token's name and id as a notice shows them: the name flattened, cut to 100 characters and quoted
 * with `"` and `\\` escaped, so a name cannot close its quotes and append a fake id. A name with letters outside
 * printable ASCII says so: a Cyrillic "р" in "рrod" looks like the owner's "prod" key (the id tells them apart).
 */
export function named(name: string, id: number): string {
  const shown = quoted(name, 100);
  const notes = [`id ${id}`];
  if (shown === '""') notes.push('no visible name');
  else if (/[^\x20-\x7e]/.test(shown)) notes.push('name not plain ASCII');
  return `${shown} (${notes.join(', ')})`;
}

/** Client-chosen text (a model name) as one quoted line of at most `max` characters that cannot close its quotes. */
export function quoted(s: string, max: number): string {
  return `"${oneLine(s, max).replace(/["\\]/g, '\\$&')}"`;
}

/**
 * What a notice never shows of client-chosen text: controls, line and paragraph separators, format characters
 * (bidi overrides and isolates, which could reverse what a line appears to say; zero-width spaces and joiners,
 * which hide inside a name that looks like another; tag characters), other default-ignorable characters (variation
 * selectors, Hangul fillers: invisible in a mail) and lone surrogates. Each run becomes one visible space, so
 * "pr<ZWSP>od" shows as "pr od", not as "prod". Other spaces (no-break, ideographic, ...) become plain spaces.
 */
const HIDDEN = /[\p{Cc}\p{Cf}\p{Cs}\p{Zl}\p{Zp}\p{Default_Ignorable_Code_Point}\p{Zs}]+/gu;

/**
 * Text chosen by a client (names, User-Agent) stays one bounded line of data in the mail: see HIDDEN. Cut at `max`
 * characters (code points: a cut never leaves half a surrogate pair).
 */
function oneLine(s: string, max = 200): string {
  const flat = s.replace(HIDDEN, ' ').trim();
  const chars = Array.from(flat);
  return chars.length > max ? `${chars.slice(0, max).join('')}…` : flat;
}
