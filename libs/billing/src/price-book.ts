import { BatchedRefresh, GatewayError, nowSeconds, type ChangeBus } from '@gw/core';
import type { PriceRow, PricesStore } from '@gw/db';
import { Type, type Static } from '@sinclair/typebox';
import { oneHourWrite } from './tiers';

const units = (description: string) => Type.Integer({ minimum: 0, maximum: 1_000_000_000_000, description });

/** The long-context price set as the API shows and accepts it. */
export const LongContextView = Type.Object({
  input: units('Uncached input tokens, per million, in the long-context tier.'),
  output: units('Output tokens, per million, in the long-context tier.'),
  cache_read: units('Prompt-cache reads, per million, in the long-context tier.'),
  cache_write: units('5-minute prompt-cache writes, per million, in the long-context tier.'),
  cache_write_1h: Type.Optional(units('1-hour prompt-cache writes, per million, in the long-context tier (default: 8/5 of its cache_write, rounded up).')),
});
export type LongContextView = Static<typeof LongContextView>;

/** A model's price as the API shows and accepts it: quota units per million tokens. */
export const PriceView = Type.Object({
  // '.' and '..' are path segments URL parsing resolves: such a price could be set but never read or deleted by name.
  model: Type.String({ minLength: 1, maxLength: 200, pattern: '^(?!\\.\\.?$)[\\s\\S]+$', error: "must be a model name other than '.' or '..'", description: 'Model name as clients request it.' }),
  input: units('Uncached input tokens, per million.'),
  output: units('Output tokens, per million.'),
  cache_read: units('Prompt-cache reads, per million.'),
  cache_write: units('Prompt-cache writes with the 5-minute TTL (and writes whose TTL the upstream does not report), per million; 0: writes of either TTL are billed at the input price, never free.'),
  cache_write_1h: Type.Union([units('Prompt-cache writes with the 1-hour TTL, per million.'), Type.Null()], {
    description: 'Prompt-cache writes with the 1-hour TTL (usage.cache_creation.ephemeral_1h_input_tokens), per million; null: 8/5 of cache_write, rounded up (Anthropic bills 1-hour writes at 2× input, 5-minute ones at 1.25×).',
  }),
  long_context_threshold: Type.Union([Type.Integer({ minimum: 1, maximum: 100_000_000 }), Type.Null()], {
    description: 'Input tokens (uncached + cache reads + cache writes) above which long_context prices apply to the whole request; null: no long-context tier. Set together with long_context.',
  }),
  long_context: Type.Union([LongContextView, Type.Null()], { description: 'Prices of the long-context tier (null: none). Audio prices do not change.' }),
  audio_input: units('Realtime audio input tokens, per million; 0: billed at the input price, never free.'),
  audio_output: units('Realtime audio output tokens, per million; 0: billed at the output price, never free.'),
  context_window: Type.Union([Type.Integer({ minimum: 1, maximum: 100_000_000 }), Type.Null()], {
    description: 'Most input tokens the model takes (null: BILLING_DEFAULT_CONTEXT_TOKENS). Input the gateway cannot measure '
      + '(URL or file sources, base64 PDFs, server tools) reserves this much; reported input beyond it is not billed.',
  }),
  web_search: Type.Union([units('Quota units per web search.'), Type.Null()], {
    description: 'Quota units per web search (Anthropic\'s web_search server tool, usage.server_tool_use.web_search_requests), '
      + 'on top of tokens; null: the server\'s BILLING_WEB_SEARCH_PRICE (default: QUOTA_PER_UNIT, one minor currency unit).',
  }),
  code_execution: Type.Union([units('Quota units per code-execution call.'), Type.Null()], {
    description: 'Quota units per code-execution call (Anthropic\'s code-execution server tool: each server_tool_use block named '
      + 'code_execution, bash_code_execution or text_editor_code_execution in the answer), on top of tokens, times the group ratio; '
      + 'Anthropic bills container time, which the gateway cannot see, so set it to the container price per hour × the time billed per call '
      + '(at least Anthropic\'s minimum). null: not priced, and a request with a code-execution tool is refused (403 tool_not_priced).',
  }),
});
export type PriceView = Static<typeof PriceView>;

/**
 * Upsert body: `model` and `input`/`output` required, the other prices default to 0, `cache_write_1h`,
 * `long_context_threshold`, `long_context`, `context_window`, `web_search` and `code_execution` to null.
 */
export const PriceInput = Type.Object({
  model: PriceView.properties.model,
  input: PriceView.properties.input,
  output: PriceView.properties.output,
  cache_read: Type.Optional(PriceView.properties.cache_read),
  cache_write: Type.Optional(PriceView.properties.cache_write),
  cache_write_1h: Type.Optional(PriceView.properties.cache_write_1h),
  long_context_threshold: Type.Optional(PriceView.properties.long_context_threshold),
  long_context: Type.Optional(PriceView.properties.long_context),
  audio_input: Type.Optional(PriceView.properties.audio_input),
  audio_output: Type.Optional(PriceView.properties.audio_output),
  context_window: Type.Optional(PriceView.properties.context_window),
  web_search: Type.Optional(PriceView.properties.web_search),
  code_execution: Type.Optional(PriceView.properties.code_execution),
});
export type PriceInput = Static<typeof PriceInput>;

export const toPriceView = (r: PriceRow): PriceView & { updated_at: number } => ({
  model: r.model, input: r.input, output: r.output, cache_read: r.cacheRead, cache_write: r.cacheWrite, cache_write_1h: r.cacheWrite1h ?? null,
  long_context_threshold: r.longContextThreshold ?? null,
  long_context: r.longContext ? {
    input: r.longContext.input, output: r.longContext.output, cache_read: r.longContext.cacheRead,
    cache_write: r.longContext.cacheWrite, cache_write_1h: r.longContext.cacheWrite1h,
  } : null,
  audio_input: r.audioInput, audio_output: r.audioOutput, context_window: r.contextWindow ?? null,
  web_search: r.webSearch ?? null, code_execution: r.codeExecution ?? null, updated_at: r.updatedAt,
});

/**
 * Per-model prices held in memory (the request path never reads the table) and kept exact by
 * 'price.changed'. Writes go through here so the event is always emitted after the write.
 */
export class PriceBook {
  private byModel = new Map<string, PriceRow>();

  /** Models changed while a re-read runs are re-read together, in one query, by the next (an import of many prices). */
  private readonly reloads = new BatchedRefresh<string>((models) => this.apply(models));

  /** Reads every price, then follows 'price.changed'. */
  static async load(repo: PricesStore, bus: ChangeBus, webSearchDefault = 0): Promise<PriceBook> {
    return new PriceBook(repo, bus, await repo.all(), webSearchDefault);
  }

  /**
   * `webSearchDefault`: quota units per web search of a price whose `web_search` is unset
   * (BILLING_WEB_SEARCH_PRICE).
   */
  constructor(private readonly repo: PricesStore, private readonly bus: ChangeBus, rows: PriceRow[], readonly webSearchDefault = 0) {
    this.byModel = new Map(rows.map((r) => [r.model, r]));
    bus.on('price.changed', ({ model }) => this.reload(model));
  }

  private reload(model: string | null): Promise<void> {
    return this.reloads.run(model);
  }

  private async apply(models: string[] | null): Promise<void> {
    if (models === null) {
      this.byModel = new Map((await this.repo.all()).map((r) => [r.model, r]));
      return;
    }
    const rows = new Map((await this.repo.byModels(models)).map((r) => [r.model, r]));
    for (const model of models) {
      const row = rows.get(model);
      if (row) this.byModel.set(model, row);
      else this.byModel.delete(model);
    }
  }

  /** Re-reads every price (a change feed's resync). */
  reloadAll(): Promise<void> {
    return this.reload(null);
  }

  /** O(1), no I/O. */
  get(model: string): PriceRow | undefined {
    return this.byModel.get(model);
  }

  /** Quota units per web search at `price`: its own `web_search`, else the default (none when there is no price). */
  webSearchPrice(price: { webSearch?: number | null } | undefined): number {
    if (!price) return 0;
    const w = price.webSearch;
    return typeof w === 'number' && Number.isSafeInteger(w) && w >= 0 ? w : this.webSearchDefault;
  }

  list(): PriceRow[] {
    return [...this.byModel.values()].sort((a, b) => a.model.localeCompare(b.model));
  }

  async upsert(p: PriceInput): Promise<PriceRow> {
    const threshold = p.long_context_threshold ?? null;
    const lc = p.long_context ?? null;
    // A tier needs both its threshold and its prices: half of one would silently bill at base prices.
    if ((threshold === null) !== (lc === null)) {
      const missing = threshold === null ? 'long_context_threshold' : 'long_context';
      throw new GatewayError(400, 'invalid_value', 'long_context_threshold and long_context are set together (or both null)', { param: missing });
    }
    const row = await this.repo.upsert({
      model: p.model, input: p.input, output: p.output, cacheRead: p.cache_read ?? 0, cacheWrite: p.cache_write ?? 0,
      cacheWrite1h: p.cache_write_1h ?? null, longContextThreshold: threshold,
      longContext: lc && { input: lc.input, output: lc.output, cacheRead: lc.cache_read, cacheWrite: lc.cache_write, cacheWrite1h: lc.cache_write_1h ?? oneHourWrite(lc.cache_write) },
      audioInput: p.audio_input ?? 0, audioOutput: p.audio_output ?? 0, contextWindow: p.context_window ?? null,
      webSearch: p.web_search ?? null, codeExecution: p.code_execution ?? null, updatedAt: nowSeconds(),
    });
    await this.bus.committed('price.changed', { model: p.model });
    return row;
  }

  async delete(model: string): Promise<void> {
    if (!(await this.repo.delete(model))) throw new GatewayError(404, 'price_not_found', `No price for model ${model}`, { param: 'model' });
    await this.bus.committed('price.changed', { model });
  }
}
