/**
 * Upstream-given text as it goes into a usage row. The upstream may send anything, and PostgreSQL refuses a NUL in
 * text and an index entry past ~2.7 kB (a long random id): the row's insert failed, the settlement with it, and the
 * session ended (1011) with the response never charged.
 */
import { createHash } from 'node:crypto';

const PLAIN_ID = /^[A-Za-z0-9_.:-]{1,64}$/;

/**
 * An id (a response's, an input item's) for a usage row's request id, which is unique in the database: an id like
 * OpenAI's is kept; any other is replaced by its digest, which no kept id can spell (`#`).
 */
export function storedId(id: string): string {
  return PLAIN_ID.test(id) ? id : `#${createHash('sha256').update(id).digest('hex').slice(0, 32)}`;
}

/** A short text (an error code, a model name, a close reason) without control characters, at most `max` characters. */
export function storedText(text: string, max = 64): string {
  return text.replace(/[\u0000-\u001f\u007f]/g, '').slice(0, max);
}
