/**
 * What one channel makes of a request before anything is sent: the body after its overrides, the
 * headers they change, the model whose price bills it, and its worst case. Planned for every candidate
 * before the reservation, so the hold covers whichever channel ends up serving (a clamped max_tokens
 * lowers it, a raised one raises it), and settled with the serving channel's own plan.
 */
import type { UsageLimits } from '@gw/billing';
import { applyHeaderPolicy, rewriteBetas, type ModelOverrides, type OverridableHeaders } from '@gw/channels';
import type { PriceRow } from '@gw/db';
import { measureRequestTokens, type MessagesRequest } from '@gw/formats';
import type { RelayChannel } from './relay';

type InputMeasure = ReturnType<typeof measureRequestTokens>;
export type Sized = { amount: number; limits: UsageLimits };

export interface ChannelPlan {
  body: MessagesRequest;
  /** `op:target` of the overrides that changed something (the usage log's `overrides`). */
  changed: readonly string[];
  /** Channel headers and forwarded client headers after the header overrides; null = the channel's as they are. */
  headers: OverridableHeaders | null;
  /** The model whose price bills the request. */
  billedModel: string;
  price: PriceRow | undefined;
  measure: InputMeasure;
  sized: Sized;
}

export interface PlanDeps {
  price(model: string): PriceRow | undefined;
  /** `upstreamBeta`: the anthropic-beta the channel itself sends (see channelBeta); it may raise the context window. */
  worstCase(body: MessagesRequest, price: PriceRow | undefined, input: InputMeasure, upstreamBeta?: string): Sized;
  /** Caps what a body's tools may cost (web-search max_uses) after overrides changed them; absent = as they are. */
  capTools?(body: MessagesRequest): MessagesRequest;
}

const NONE: readonly string[] = Object.freeze([]);

/** The plan of a channel with no overrides that bills the requested model (the common case, shared by all of them). */
export function basePlan(body: MessagesRequest, measure: InputMeasure, d: PlanDeps): ChannelPlan {
  const price = d.price(body.model);
  return { body, changed: NONE, headers: null, billedModel: body.model, price, measure, sized: d.worstCase(body, price, measure) };
}

/** `base` itself when the channel changes nothing (no override applies, bills the requested model). */
export function planFor(ch: RelayChannel, base: ChannelPlan, clientHeaders: Headers, d: PlanDeps): ChannelPlan {
  const model = base.body.model;
  const ov: ModelOverrides | null = ch.overrides?.forModel(model) ?? null;
  const upstreamModel = ch.modelMapping[model] ?? model;
  // Billing the upstream model needs its price; without one the requested model's applies (and the log says so).
  const upstreamPrice = ch.billingModel === 'upstream' && upstreamModel !== model ? d.price(upstreamModel) : undefined;
  const beta = channelBeta(ch, clientHeaders);
  if (!ov && !upstreamPrice && beta === undefined) return base;
  const changed: string[] = [];
  const overridden = ov ? ov.applyBody(base.body, changed) : base.body;
  const body = overridden !== base.body && d.capTools ? d.capTools(overridden) : overridden;
  const headers = ov ? ov.applyHeaders({ extra: ch.headers, forwarded: applyHeaderPolicy(ch.headerPolicy, clientHeaders).forwarded }, changed) : null;
  if (body === base.body && !upstreamPrice && beta === undefined) return { ...base, changed, headers };
  const measure = ov?.touchesInput && body !== base.body ? remeasure(base, body) : base.measure;
  const price = upstreamPrice ?? base.price;
  return { body, changed, headers, billedModel: upstreamPrice ? upstreamModel : model, price, measure, sized: d.worstCase(body, price, measure, beta) };
}

/**
 * The anthropic-beta a native channel sends its upstream when the channel made it, not the client (whose own is in the
 * base plan's sizing): the channel's own `anthropic-beta` header (the adapter sends it in place of the client's; an
 * override cannot change it), or a header_policy rewrite of the client's. Undefined otherwise. Such a beta can ask for
 * a larger context window (`context-1m-*`): sized with the client's headers alone, the usage clamp billed 800k input
 * tokens the upstream read as 200k.
 */
function channelBeta(ch: RelayChannel, clientHeaders: Headers): string | undefined {
  if (ch.type !== 'anthropic') return undefined;
  if (Object.hasOwn(ch.headers, 'anthropic-beta')) return ch.headers['anthropic-beta'];
  const rewrite = ch.headerPolicy.beta_rewrite;
  if (!rewrite || !Object.keys(rewrite).length) return undefined;
  const client = clientHeaders.get('anthropic-beta') ?? '';
  const sent = rewriteBetas(client, ch.headerPolicy);
  return sent !== client ? sent : undefined;
}

/**
 * The input measure of a body whose overrides changed system, tools or mcp_servers (never messages: refused),
 * without re-reading the conversation: the measure is a sum, so the old parts are taken out and the new ones
 * added. Only when the old parts and the rest were both unmeasurable is the whole body measured again.
 */
export function remeasure(base: ChannelPlan, body: MessagesRequest): InputMeasure {
  const before = partOf(base.body);
  const after = partOf(body);
  if (base.measure.unmeasured && before.unmeasured) return measureRequestTokens(body);
  return {
    estimate: base.measure.estimate - before.estimate + after.estimate,
    bound: base.measure.bound - before.bound + after.bound,
    unmeasured: base.measure.unmeasured || after.unmeasured,
  };
}

const partOf = (b: MessagesRequest) => measureRequestTokens({ system: b.system, tools: b.tools, mcp_servers: (b as { mcp_servers?: unknown }).mcp_servers, messages: [] });

/** The hold that covers every plan: the largest amount, and the most tokens any of them may use (for token limits). */
export function coverAll(plans: ChannelPlan[], base: ChannelPlan): { sized: Sized; tokens: number } {
  let sized = base.sized;
  let tokens = base.sized.limits.input + base.sized.limits.maxOutput;
  if (plans.length) {
    sized = plans[0]!.sized;
    tokens = 0;
    for (const p of plans) {
      if (p.sized.amount > sized.amount) sized = p.sized;
      tokens = Math.max(tokens, p.sized.limits.input + p.sized.limits.maxOutput);
    }
  }
  return { sized, tokens };
}
