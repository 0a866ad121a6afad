/**
 * `bun run bench/body-walk.ts`: CPU per request of the front door's walk over a parsed JSON body (jsonBodyIssue),
 * on a ~23 KB body shaped like a /v1/messages request (system prompt, turns of text, tools with JSON schemas).
 * On a tree from before the single walk, core still exports nulTextAt, and nul-text.ts walked the body a second
 * time with it: that walk is timed with the first, as a request paid both. Median of 15 rounds of 2,000 walks.
 */
import * as core from '@gw/core';

const words = (n: number, seed: number) => Array.from({ length: n }, (_, i) => `word${(i * 7919 + seed) % 1000}`).join(' ');
const body = {
  model: 'claude-sonnet-4-5', max_tokens: 4096, stream: true, temperature: 0.7,
  system: [{ type: 'text', text: words(300, 1), cache_control: { type: 'ephemeral' } }],
  tools: Array.from({ length: 6 }, (_, t) => ({
    name: `tool_${t}`, description: words(25, t),
    input_schema: { type: 'object', properties: Object.fromEntries(Array.from({ length: 6 }, (_, p) => [`field_${p}`, { type: 'string', description: words(8, t * 10 + p) }])), required: ['field_0'] },
  })),
  messages: Array.from({ length: 16 }, (_, m) => ({
    role: m % 2 ? 'assistant' : 'user',
    content: [{ type: 'text', text: words(110, m) }, ...(m % 4 === 1 ? [{ type: 'tool_use', id: `toolu_${m}`, name: 'tool_1', input: { field_0: words(5, m) } }] : [])],
  })),
  metadata: { user_id: 'user-123' },
};
const size = JSON.stringify(body).length;
const second = (core as { nulTextAt?: (v: unknown) => string | null }).nulTextAt;
const walk = (v: unknown) => { core.jsonBodyIssue(v); second?.(v); };

const N = 2_000;
const rounds: number[] = [];
for (let r = 0; r < 16; r++) {
  const v = JSON.parse(JSON.stringify(body)); // a fresh parse per round, as each request has its own
  const c0 = process.cpuUsage();
  for (let i = 0; i < N; i++) walk(v);
  const c = process.cpuUsage(c0);
  if (r > 0) rounds.push((c.user + c.system) / N); // round 0 warms up
}
rounds.sort((a, b) => a - b);
console.log(JSON.stringify({ body_bytes: size, walks: second ? 2 : 1, cpu_us_per_request: { median: +rounds[7]!.toFixed(1), min: +rounds[0]!.toFixed(1), max: +rounds.at(-1)!.toFixed(1) } }));
