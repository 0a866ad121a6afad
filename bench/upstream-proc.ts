/**
 * Benchmark upstream: the Anthropic double on its fast path (no recording, no delays). A request whose
 * metadata.user_id is "hold" gets a stream that sends its first frames and then waits 30 s per frame,
 * so the load generator can hold many streams open. Prints {"url"} on stdout.
 * BENCH_STREAM_EVENTS (default 11): the events of an answer streamed in full (a text answer has 6 besides its
 * deltas: message_start, content_block_start, ping, content_block_stop, message_delta, message_stop; the
 * gateway's translation of the OpenAI double's answer has the same events).
 */
import { startAnthropicUpstream } from '../tests/doubles/anthropic-upstream';
import { startOpenAIUpstream } from '../tests/doubles/openai-upstream';

// BENCH_UPSTREAM=openai: the OpenAI Chat Completions double instead (for a channel of type openai: translated answers).
const up = process.env.BENCH_UPSTREAM === 'openai' ? startOpenAIUpstream({ maxRecorded: 0 }) : startAnthropicUpstream({ maxRecorded: 0 });
const words = Math.max(1, Number(process.env.BENCH_STREAM_EVENTS ?? 11) - 6);
const text = ['Hello', 'from', 'the', 'benchmark', 'upstream.'].concat(Array.from({ length: Math.max(0, words - 5) }, (_, i) => `word${i}`)).slice(0, words).join(' ');
up.script((req) => (req.body?.metadata?.user_id === 'hold' ? { text: 'held open', chunkDelayMs: 30_000 } : { text }));
console.log(JSON.stringify({ url: up.url }));
process.on('SIGTERM', () => process.exit(0));
