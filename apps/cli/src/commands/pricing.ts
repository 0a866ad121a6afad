/** `pricing`: per-model prices (`/api/pricing/`), in quota units per million tokens. */
import type { Command } from 'commander';
import { pathSegment } from '../core/client';
import type { App } from '../core/context';
import { addFields, bodyFrom, requireFields, type Field } from '../core/fields';
import { col, table, time } from '../core/output';

const FIELDS: Field[] = [
  { name: 'input', kind: 'int', desc: 'uncached input tokens, quota units per million (required)' },
  { name: 'output', kind: 'int', desc: 'output tokens, per million (required)' },
  { name: 'cache_read', kind: 'int', desc: 'prompt-cache reads, per million' },
  { name: 'cache_write', kind: 'int', desc: 'prompt-cache writes with the 5-minute TTL (or an unreported one), per million (unset or 0: the input price; writes are never free)' },
  { name: 'cache_write_1h', kind: 'int', desc: 'prompt-cache writes with the 1-hour TTL, per million (default: 8/5 of cache_write, Anthropic\'s 2× input against 1.25×; the input price without a cache_write)' },
  { name: 'long_context_threshold', kind: 'int', desc: 'input tokens (uncached + cache reads + writes) above which --long-context prices apply to the whole request' },
  { name: 'long_context', kind: 'json', desc: 'long-context prices: \'{"input":n,"output":n,"cache_read":n,"cache_write":n,"cache_write_1h":n}\' (with --long-context-threshold)' },
  { name: 'audio_input', kind: 'int', desc: 'realtime audio input tokens, per million (unset or 0: the input price)' },
  { name: 'audio_output', kind: 'int', desc: 'realtime audio output tokens, per million (unset or 0: the output price)' },
  { name: 'context_window', kind: 'int', desc: 'most input tokens the model takes (default: the server\'s BILLING_DEFAULT_CONTEXT_TOKENS); unmeasurable input reserves this much' },
  { name: 'web_search', kind: 'int', desc: 'quota units per web search (Anthropic\'s web_search server tool), on top of tokens (default: the server\'s BILLING_WEB_SEARCH_PRICE)' },
  { name: 'code_execution', kind: 'int', desc: 'quota units per code-execution call (Anthropic\'s code-execution server tool), on top of tokens: the container price per hour × the time billed per call (unset: requests with the tool are refused)' },
];

const COLUMNS = [
  col('MODEL', 'model'), col('INPUT', 'input', { right: true }), col('OUTPUT', 'output', { right: true }),
  col('CACHE READ', 'cache_read', { right: true }), col('CACHE WRITE', 'cache_write', { right: true }),
  col('CACHE 1H', 'cache_write_1h', { right: true }), col('LONG CTX >', 'long_context_threshold', { right: true }),
  col('AUDIO IN', 'audio_input', { right: true }), col('AUDIO OUT', 'audio_output', { right: true }),
  col('CONTEXT', 'context_window', { right: true }),
  col('WEB SEARCH', 'web_search', { right: true, fmt: (v) => (v === null || v === undefined ? 'default' : String(v)) }),
  // Unset: the tool is refused (403 tool_not_priced).
  col('CODE EXEC', 'code_execution', { right: true, fmt: (v) => (v === null || v === undefined ? 'refused' : String(v)) }),
  col('UPDATED', 'updated_at', { fmt: time }),
];

/** The list endpoint may answer a page or a plain array; both print the same. */
const itemsOf = (d: any): any[] => (Array.isArray(d) ? d : d?.items ?? []);

export function registerPricing(program: Command, app: App): void {
  const group = program.command('pricing')
    .description('Model prices in quota units per million tokens (web searches: per search, code execution: per call)')
    .addHelpText('after', '\nExamples:\n  $ gw pricing list\n  $ gw pricing set claude-sonnet-4 --input 3000000 --output 15000000 --context-window 200000 --web-search 50000 --code-execution 2084\n  $ gw pricing set claude-sonnet-4-5 --input 1500000 --output 7500000 --cache-read 150000 --cache-write 1875000 --cache-write-1h 3000000 \\\n      --context-window 1000000 --long-context-threshold 200000 \\\n      --long-context \'{"input":3000000,"output":11250000,"cache_read":300000,"cache_write":3750000,"cache_write_1h":6000000}\'');

  group.command('list')
    .description('List model prices')
    .addHelpText('after', '\nExample:\n  $ gw pricing list --json')
    .action(app.action(async (ctx) => {
      const data = await ctx.client().call('GET', '/api/pricing/');
      ctx.print(data, () => table(itemsOf(data), COLUMNS));
    }));

  group.command('get')
    .description('Show the price of one model')
    .argument('<model>', 'model name')
    .addHelpText('after', '\nExample:\n  $ gw pricing get claude-sonnet-4')
    .action(app.action(async (ctx, [model]) => {
      const data = await ctx.client().call('GET', `/api/pricing/${pathSegment(model, 'model')}`);
      ctx.print(data, () => table([data], COLUMNS));
    }));

  addFields(group.command('set').description('Create or replace the price of a model').argument('<model>', 'model name as clients request it'), FIELDS)
    .addHelpText('after', '\nExample:\n  $ gw pricing set claude-haiku-4 --input 800000 --output 4000000 --cache-read 80000')
    .action(app.action(async (ctx, [model], o) => {
      const body = { ...(await bodyFrom(ctx, o, FIELDS)), model };
      requireFields(body, ['input', 'output']);
      const data = await ctx.client().call('PUT', '/api/pricing/', { body });
      ctx.print(data, () => `Set price of ${model}.\n`);
    }));

  group.command('delete')
    .description('Remove the price of a model (requests for it then fail as unpriced)')
    .argument('<model>', 'model name')
    .addHelpText('after', '\nExample:\n  $ gw pricing delete old-model')
    .action(app.action(async (ctx, [model]) => {
      const data = await ctx.client().call('DELETE', `/api/pricing/${pathSegment(model, 'model')}`);
      ctx.print(data, () => `Deleted price of ${model}.\n`);
    }));
}
