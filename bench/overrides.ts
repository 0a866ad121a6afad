/**
 * `bun run bench/overrides.ts`: what channel overrides add to a /v1/messages request, measured in-process
 * (the full `bun run bench` on a shared 2-core machine varies by more than the few microseconds at stake).
 * Times the per-request planning step (basePlan + planFor per candidate + coverAll) for a channel without
 * overrides, the same with four overrides (clamp, remove, set, set_header), with one that sets `system` (the
 * input is re-measured by difference, without re-reading the conversation), and, for scale, one
 * measureRequestTokens of the same body, which every request already paid before this change.
 */
import { compileOverrides, normalizeOverrides } from '@gw/channels';
import { measureRequestTokens, type MessagesRequest } from '@gw/formats';
import { basePlan, coverAll, planFor, type PlanDeps } from '../libs/relay/src/channel-plan';
import type { RelayChannel } from '../libs/relay/src/relay';

const N = Number(process.env.BENCH_N ?? 200_000);
// A Claude Code-like request: system prompt, tools, a 12-turn conversation.
const body: MessagesRequest = {
  model: 'm', max_tokens: 32_000, temperature: 1, stream: true, system: 'You are a coding assistant. '.repeat(100),
  tools: Array.from({ length: 10 }, (_, i) => ({ name: `tool_${i}`, description: 'Does a thing. '.repeat(10), input_schema: { type: 'object', properties: { a: { type: 'string' } } } })),
  messages: Array.from({ length: 12 }, (_, i) => ({ role: i % 2 ? 'assistant' : 'user', content: `Turn ${i}: ${'some text '.repeat(50)}` })) as MessagesRequest['messages'],
};
const channel = (overrides: RelayChannel['overrides']): RelayChannel => ({
  id: 1, type: 'anthropic', baseUrl: 'http://x', apiKey: 'k', models: ['m'], modelMapping: {}, groups: ['default'], priority: 0, weight: 1, status: 1,
  timeoutMs: 1000, headers: {}, headerPolicy: {}, keys: [], keySelection: 'random', failureRules: {}, firstByteTimeoutMs: null, probeIntervalMs: null,
  overrides, billingModel: 'requested', reasoningEcho: 'auto',
});
const plain = channel(null);
const withOv = channel(compileOverrides(normalizeOverrides([
  { op: 'clamp', path: 'max_tokens', max: 8192 }, { op: 'remove', path: 'temperature' }, { op: 'set', path: 'top_p', value: 0.9 }, { op: 'set_header', name: 'x-team', value: 'blue' },
]), ['m'], {}));
const withSystem = channel(compileOverrides(normalizeOverrides([{ op: 'set', path: 'system', value: 'Be brief.' }]), ['m'], {}));
const deps: PlanDeps = { price: () => undefined, worstCase: () => ({ amount: 1, limits: { maxInput: 1, maxOutput: 1, input: 1 } }) };
const headers = new Headers({ 'user-agent': 'x' });
const measure = measureRequestTokens(body);

function time(label: string, fn: () => unknown): number {
  for (let i = 0; i < N / 10; i++) fn();
  let best = Infinity;
  for (let round = 0; round < 5; round++) {
    const t = Bun.nanoseconds();
    for (let i = 0; i < N; i++) fn();
    best = Math.min(best, (Bun.nanoseconds() - t) / N);
  }
  console.log(`${label.padEnd(48)} ${best.toFixed(0).padStart(7)} ns/request (best of 5 x ${N})`);
  return best;
}

time('plan, channel without overrides', () => { const b = basePlan(body, measure, deps); return coverAll([planFor(plain, b, headers, deps)], b); });
time('plan, channel with 4 overrides', () => { const b = basePlan(body, measure, deps); return coverAll([planFor(withOv, b, headers, deps)], b); });
time('plan, channel setting system (re-measured)', () => { const b = basePlan(body, measure, deps); return coverAll([planFor(withSystem, b, headers, deps)], b); });
time('for scale: measureRequestTokens of the same body', () => measureRequestTokens(body));
