/**
 * Folding the usage reports of one translated stream (several chunks may carry `usage`) into the one that is billed.
 * Which report is the last is the upstream's choice: with the last one winning, an upstream sending a big report and
 * then a small one (completion_tokens 5,000, then 6) was billed 6, and a 1,000-token prompt re-reported later as all
 * cached was billed no regular input. So each side keeps the report that bills the most:
 * - output: the highest completion count (a tie: the later report, so a repeated final total adds nothing on top);
 * - input: the prompt is compared as one total (uncached + cache reads + cache writes, i.e. prompt_tokens): the highest
 *   total wins; with the same total, fewer cache reads (they are the cheapest), then more cache writes (the dearest).
 * A usable count beats an unusable one (which billing would replace by an estimate); a report without the count
 * (`undefined`) keeps the earlier one.
 */
import type { Usage } from '../anthropic/response';
import { usableCount } from './common';

/** A cache part as billed: an unusable one is billed as none (usageFromOpenAI keeps the prompt whole as input then). */
const part = (n: unknown): number => (usableCount(n) ? n : 0);

/** The prompt total of a report, or -1 when its prompt count is unusable. */
const promptTotal = (u: Usage): number => (usableCount(u.input_tokens) ? u.input_tokens + part(u.cache_read_input_tokens) + part(u.cache_creation_input_tokens) : -1);

/** Whether the input side of `next` bills at least as much as that of `prev` (a tie in every respect: the later one). */
function promptOutranks(next: Usage, prev: Usage): boolean {
  const a = promptTotal(next);
  const b = promptTotal(prev);
  if (a !== b) return a > b;
  const reads = part(next.cache_read_input_tokens) - part(prev.cache_read_input_tokens);
  if (reads !== 0) return reads < 0;
  return part(next.cache_creation_input_tokens) >= part(prev.cache_creation_input_tokens);
}

/** Whether an output count `next` is to be billed over `prev` (see the module comment). */
export function outputOutranks(next: number | undefined, prev: number | undefined): boolean {
  if (next === undefined) return false;
  if (prev === undefined) return true;
  if (usableCount(next) !== usableCount(prev)) return usableCount(next);
  return !usableCount(next) || next >= prev;
}

/**
 * The usage billed after `next` arrives, given the fold so far (`prev`, null before the first report), and whether
 * `next`'s output count is the one now billed (its chunk is where output counted on top of it starts).
 */
export function foldUsage(prev: Usage | null, next: Usage): { usage: Usage; outputTaken: boolean } {
  if (!prev) return { usage: next, outputTaken: next.output_tokens !== undefined };
  const input = next.input_tokens === undefined ? prev
    : prev.input_tokens === undefined || promptOutranks(next, prev) ? next : prev;
  const outputTaken = outputOutranks(next.output_tokens, prev.output_tokens);
  return { usage: { ...input, output_tokens: outputTaken ? next.output_tokens : prev.output_tokens }, outputTaken };
}
