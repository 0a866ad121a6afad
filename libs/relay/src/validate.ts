import { GatewayError, pointerToParam, valueAt } from '@gw/core';
import { CountTokensRequestSchema, MessagesRequestSchema, emptyContentIssue, foldSystemTurns, type CountTokensRequest, type MessagesRequest } from '@gw/formats';
import type { TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { ValueErrorType } from '@sinclair/typebox/errors';
import { firstIssue } from './schema-issue';

/**
 * Request checks of /v1/messages that run before any key rule: the version header and the body
 * schema. Each error names the offending header or field in `param`.
 */

/** The API version a request declares: `vendor-version`, else its alias `anthropic-version`. */
export function checkVersionHeader(headers: Headers): string {
  const v = headers.get('vendor-version') ?? headers.get('anthropic-version');
  if (v === null || v.trim() === '') {
    throw new GatewayError(400, 'missing_header', 'The vendor-version header is required (a date YYYY-MM-DD, e.g. 2023-06-01); anthropic-version is accepted as an alias', { param: 'vendor-version' });
  }
  if (!knownDate(v.trim())) {
    throw new GatewayError(400, 'invalid_header', `vendor-version must be a calendar date YYYY-MM-DD, got "${v.slice(0, 40)}"`, { param: 'vendor-version' });
  }
  return v.trim();
}

/** YYYY-MM-DD naming a day that exists (2023-02-30 does not). */
export function isCalendarDate(s: string): boolean {
  const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(s);
  if (!m) return false;
  const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const t = new Date(Date.UTC(y, mo - 1, d));
  return t.getUTCFullYear() === y && t.getUTCMonth() === mo - 1 && t.getUTCDate() === d;
}

/**
 * Clients send the same one or two version dates on every request: the dates already seen valid are
 * remembered (at most a handful, so odd values cannot grow it) instead of parsed each time.
 */
const validDates = new Set<string>();
const MAX_REMEMBERED_DATES = 16;
function knownDate(s: string): boolean {
  if (validDates.has(s)) return true;
  if (!isCalendarDate(s)) return false;
  if (validDates.size < MAX_REMEMBERED_DATES) validDates.add(s);
  return true;
}

const messagesCheck = TypeCompiler.Compile(MessagesRequestSchema);
const countCheck = TypeCompiler.Compile(CountTokensRequestSchema);

function codeOf(type: ValueErrorType): string {
  switch (type) {
    case ValueErrorType.NumberMinimum: case ValueErrorType.NumberMaximum:
    case ValueErrorType.IntegerMinimum: case ValueErrorType.IntegerMaximum:
    case ValueErrorType.NumberExclusiveMinimum: case ValueErrorType.NumberExclusiveMaximum:
    case ValueErrorType.ArrayMinItems: case ValueErrorType.ArrayMaxItems:
    case ValueErrorType.StringMinLength: case ValueErrorType.StringMaxLength:
      return 'out_of_range';
    case ValueErrorType.Union: case ValueErrorType.Literal: return 'invalid_value';
    default: return 'invalid_type';
  }
}

/** `/messages/0/role` → `messages.0.role`: the path as Anthropic's messages write it. */
const dotted = (pointer: string) => pointer.split('/').filter(Boolean).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~')).join('.');

/**
 * Throws the 400 for the first problem: `param` in the API's `messages[0].role` form, the message in
 * Anthropic's wording (`messages.0.role: Input should be 'user' or 'assistant'`).
 */
function firstError(schema: TSchema, body: unknown): never {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new GatewayError(400, 'invalid_type', 'Input should be a valid dictionary', { param: '' });
  }
  const issue = firstIssue(schema, body);
  if (!issue) throw new GatewayError(400, 'invalid_request', 'Invalid request body');
  const param = pointerToParam(issue.pointer);
  const where = dotted(issue.pointer) || 'body';
  if (issue.type === ValueErrorType.ObjectRequiredProperty || (issue.pointer && valueAt(body, issue.pointer) === undefined)) {
    throw new GatewayError(400, 'missing_field', `${where}: Field required`, { param });
  }
  throw new GatewayError(400, codeOf(issue.type), `${where}: ${issue.message}`, { param });
}

/**
 * Validates a /v1/messages body; throws 400 naming the first bad field. System turns in `messages` are
 * folded into `system` first (see foldSystemTurns), so the returned body may be a new object.
 */
export function validateMessagesBody(body: unknown): MessagesRequest {
  const folded = foldSystemTurns(body);
  if (messagesCheck.Check(folded)) return nonEmpty(folded);
  firstError(MessagesRequestSchema, folded);
}

/** A schema-valid body, unless it has content Anthropic refuses as empty (emptyContentIssue): then its 400. */
function nonEmpty<T extends { messages: MessagesRequest['messages'] }>(body: T): T {
  const issue = emptyContentIssue(body.messages);
  if (issue) throw new GatewayError(400, 'invalid_value', issue.message, { param: issue.param });
  return body;
}

/** Validates a /v1/messages/count_tokens body (system turns folded the same way). */
export function validateCountTokensBody(body: unknown): CountTokensRequest {
  const folded = foldSystemTurns(body);
  if (countCheck.Check(folded)) return nonEmpty(folded);
  firstError(CountTokensRequestSchema, folded);
}
