/**
 * `redeem <code>`: a user turns a redemption code into quota. `code create|list|batches|revoke`: admins
 * mint batches (the codes are shown once: print them, or write them to a CSV with `--out`), list them
 * masked, and revoke a batch's unused codes.
 */
import { closeSync, openSync, rmSync, writeSync } from 'node:fs';
import { Option, type Command } from 'commander';
import type { App } from '../core/context';
import { UsageError } from '../core/errors';
import { addPaging, pagingQuery, parseId, parseTime } from '../core/fields';
import { col, details, pageText, time } from '../core/output';
import { apiParams } from '../core/params';

const STATUSES = ['unused', 'redeemed', 'expired', 'revoked'] as const;
const DEFAULT_DAYS = 30;

const CODE_COLUMNS = [
  col('ID', 'id', { right: true }), col('CODE', 'prefix', { fmt: (v) => `${v}…` }), col('BATCH', 'batch'), col('QUOTA', 'quota', { right: true }),
  col('STATUS', 'status'), col('EXPIRES', 'expires_at', { fmt: time }), col('REDEEMED BY', 'redeemed_by', { right: true }),
  col('REDEEMED', 'redeemed_at', { fmt: time }),
];
const BATCH_COLUMNS = [
  col('BATCH', 'batch'), col('QUOTA', 'quota', { right: true }), col('TOTAL', 'total', { right: true }), col('UNUSED', 'unused', { right: true }),
  col('REDEEMED', 'redeemed', { right: true }), col('EXPIRED', 'expired', { right: true }), col('REVOKED', 'revoked', { right: true }),
  col('CREATED', 'created_at', { fmt: time }), col('EXPIRES', 'expires_at', { fmt: time }),
];

/**
 * Claims `path` before the codes exist: created new (never overwriting), mode 0600. A file that cannot be
 * written is then a usage error before anything is minted, not codes lost after.
 */
function claimOutFile(path: string): number {
  try {
    return openSync(path, 'wx', 0o600);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new UsageError(code === 'EEXIST' ? `--out: ${path} already exists (codes are never overwritten)` : `--out: cannot create ${path} (${code ?? String(e)})`);
  }
}

/**
 * One CSV cell, as the gateway's own export writes them: text a spreadsheet would run as a formula (= + - @ tab
 * CR LF NUL first) gets a leading apostrophe, and a comma, quote, semicolon, tab or line break is quoted. The
 * codes come from whatever answers at the URL; a batch name may start with '-'.
 */
const csvCell = (v: unknown) => {
  const s = typeof v === 'string' && /^[=+\-@\t\r\n\0]/.test(v) ? `'${v}` : String(v);
  return /[",;\t\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
};

export function registerRedeem(program: Command, app: App): void {
  program.command('redeem')
    .description('Redeem a code: its quota is credited to your balance')
    .argument('<code>', 'the redemption code (gwr_…), or - to read it from the first line of stdin (kept out of ps and shell history)')
    .addHelpText('after', '\nExamples:\n  $ gw redeem gwr_3kF9…\n  $ gw redeem - < code.txt')
    .action(app.action(async (ctx, [arg]) => {
      const code = arg === '-' ? (await ctx.io.readStdin()).split(/\r?\n/)[0]?.trim() : arg;
      if (!code) throw new UsageError('no code: the first line of stdin is empty');
      const data = await ctx.client().call('POST', '/api/user/redeem', { body: { code } });
      ctx.print(data, () => `Redeemed ${data.quota} quota units; balance now ${data.balance}.\n`);
    }));

  const group = program.command('code')
    .description('Redemption codes (admin): create batches, list, revoke')
    .addHelpText('after', '\nExamples:\n  $ gw code create --batch promo-nov --count 100 --quota 500000 --out promo-nov.csv\n  $ gw code list --batch promo-nov --status unused\n  $ gw code revoke promo-nov');

  const create = group.command('create')
    .description('Create a batch of single-use codes; they are shown only once')
    .addOption(new Option('--batch <name>', 'batch name, new for each batch (letters, digits, . _ : -)').makeOptionMandatory())
    .addOption(new Option('--count <n>', 'how many codes (1-1000)').argParser(parseId).makeOptionMandatory())
    .addOption(new Option('--quota <n>', 'quota units each code credits').argParser(parseId).makeOptionMandatory())
    .addOption(new Option('--expires-at <time>', 'unix seconds or ISO date after which codes are void').argParser(parseTime).conflicts('days'))
    .addOption(new Option('--days <n>', `days until the codes expire (default ${DEFAULT_DAYS})`).argParser(parseId))
    .option('--out <file.csv>', 'write the codes to this new file (mode 0600) instead of printing them')
    .addHelpText('after', '\nExamples:\n  $ gw code create --batch promo-nov --count 100 --quota 500000 --days 14 --out promo-nov.csv\n  $ gw code create --batch vip-1 --count 1 --quota 10000000 --expires-at 2027-01-01 --json');
  apiParams(create, { expires_at: { flag: '--expires-at (or --days)' } });
  create.action(app.action(async (ctx, _a, o) => {
    const expiresAt: number = o.expiresAt ?? Math.floor(Date.now() / 1000) + (o.days ?? DEFAULT_DAYS) * 86_400;
    const fd = o.out === undefined ? null : claimOutFile(o.out);
    let data: any;
    try {
      data = await ctx.client().call('POST', '/api/redemption/', { body: { batch: o.batch, count: o.count, quota: o.quota, expires_at: expiresAt } });
    } catch (e) {
      if (fd !== null) { closeSync(fd); rmSync(o.out, { force: true }); }
      throw e;
    }
    if (fd === null) {
      ctx.print(data, () => `${details([['batch', data.batch], ['quota each', data.quota], ['expires', time(data.expires_at)]])}\n${data.codes.join('\n')}\n\nThese codes are shown only now: the gateway keeps only their hashes.\n`);
      return;
    }
    try {
      writeSync(fd, `code,batch,quota,expires_at\n${data.codes.map((c: string) => [c, data.batch, data.quota, data.expires_at].map(csvCell).join(',')).join('\n')}\n`);
    } finally {
      closeSync(fd);
    }
    const summary = { batch: data.batch, quota: data.quota, expires_at: data.expires_at, count: data.codes.length, out: o.out };
    ctx.print(summary, () => `Created ${summary.count} codes in batch ${summary.batch} (${summary.quota} quota units each, expire ${time(summary.expires_at)}); written to ${o.out}.\n`);
  }));

  addPaging(group.command('list')
    .description('Codes, newest first, masked (prefix only)')
    .option('--batch <name>', 'only this batch')
    .addOption(new Option('--status <status>', 'only codes in this state').choices(STATUSES))
    .addHelpText('after', '\nExample:\n  $ gw code list --batch promo-nov --status redeemed'))
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', '/api/redemption/', { query: { batch: o.batch, status: o.status, ...pagingQuery(o) } });
      ctx.print(data, () => pageText(data, CODE_COLUMNS));
    }));

  addPaging(group.command('batches')
    .description('Batches, newest first, with their counts by status')
    .addHelpText('after', '\nExample:\n  $ gw code batches'))
    .action(app.action(async (ctx, _a, o) => {
      const data = await ctx.client().call('GET', '/api/redemption/batch', { query: pagingQuery(o) });
      ctx.print(data, () => pageText(data, BATCH_COLUMNS));
    }));

  group.command('revoke')
    .description('Revoke every unused code of a batch (redeemed codes stay redeemed)')
    .argument('<batch>', 'the batch name')
    .addHelpText('after', '\nExample:\n  $ gw code revoke promo-nov')
    .action(app.action(async (ctx, [batch]) => {
      const data = await ctx.client().call('POST', '/api/redemption/revoke', { body: { batch } });
      ctx.print(data, () => `Revoked ${data.revoked} unused codes of batch ${data.batch}.\n`);
    }));
}
