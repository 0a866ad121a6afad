/**
 * A JSON Lines download as one JSON array, streamed: `--json` promises exactly one JSON document on stdout, and
 * an export can be far larger than memory, so the rows are re-written one at a time as `[`, `row,\n…`, `]`.
 */
import { ApiError } from './errors';
import { jsonText } from './output';

/**
 * The array's text in pieces, one per row. Each row is parsed and written again with `jsonText`, so characters that
 * could drive a terminal are `\uXXXX` escapes as in every other `--json` output; a line that is not JSON, or one
 * longer than `maxLine` bytes without an end, is refused (whatever answers at the URL may be hostile).
 */
export async function* jsonArrayOf(chunks: AsyncIterable<Uint8Array>, url: string, maxLine: number): AsyncGenerator<string> {
  const dec = new TextDecoder();
  let pending = '';
  let rows = 0;
  const row = (line: string): string => {
    let value: unknown;
    try { value = JSON.parse(line); } catch { throw new ApiError(200, 'http_200', `the server at ${url} sent an export line that is not JSON; is this an AI gateway?`); }
    return `${rows++ === 0 ? '[\n' : ',\n'}${jsonText(value)}`;
  };
  for await (const chunk of chunks) {
    pending += dec.decode(chunk, { stream: true });
    let out = '';
    for (let nl = pending.indexOf('\n'); nl >= 0; nl = pending.indexOf('\n')) {
      const line = pending.slice(0, nl).trim();
      pending = pending.slice(nl + 1);
      if (line) out += row(line);
    }
    if (pending.length > maxLine) throw new ApiError(200, 'answer_too_large', `the server at ${url} sent an export line longer than ${maxLine / 1024 / 1024} MiB; is this an AI gateway?`);
    if (out) yield out;
  }
  const last = (pending + dec.decode()).trim();
  yield `${last ? row(last) : ''}${rows ? '\n]\n' : '[]\n'}`;
}
