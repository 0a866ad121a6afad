/**
 * A /v1/messages stream left running for a crash test: the upstream double sends message_start,
 * content_block_start and two text deltas for prompts starting with "hold", then pauses (the stream is live,
 * not finished); `streamUntilPause` opens one and reads it until both deltas arrived.
 */
import { expect } from 'bun:test';
import type { UpstreamDouble } from '../doubles/anthropic-upstream';

export const HELD_ANSWER = 'alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu';

/** Scripts `up`: prompts starting with "hold" pause after two deltas for `pauseMs`; the rest answer at once. */
export function holdStreams(up: UpstreamDouble, pauseMs = 25_000): void {
  up.script((req) => (String(req.body?.messages?.[0]?.content).startsWith('hold') ? { text: HELD_ANSWER, pause: { afterFrames: 4, ms: pauseMs } } : { text: HELD_ANSWER }));
}

/** Starts a stream of `model` at `url` and reads it until both text deltas before the pause have arrived. */
export async function streamUntilPause(url: string, key: string, model: string, prompt: string): Promise<{ cancel(): Promise<void> }> {
  const res = await fetch(`${url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-api-key': key, 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model, max_tokens: 1000, stream: true, messages: [{ role: 'user', content: prompt }] }),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let text = '';
  while ((text.match(/content_block_delta/g) ?? []).length < 2) {
    const { done, value } = await reader.read();
    if (done) throw new Error(`stream ended early: ${text}`);
    text += dec.decode(value);
  }
  return reader;
}
