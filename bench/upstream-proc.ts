/**
 * Benchmark upstream: the Anthropic double on its fast path (no recording, no delays). A request whose
 * metadata.user_id is "hold" gets a stream that sends its first frames and then waits 30 s per frame,
 * so the load generator can hold many streams open. Prints {"url"} on stdout.
 */
import { startAnthropicUpstream } from '../tests/doubles/anthropic-upstream';

const up = startAnthropicUpstream({ maxRecorded: 0 });
up.script((req) => (req.body?.metadata?.user_id === 'hold' ? { text: 'held open', chunkDelayMs: 30_000 } : { text: 'Hello from the benchmark upstream.' }));
console.log(JSON.stringify({ url: up.url }));
process.on('SIGTERM', () => process.exit(0));
