import { GatewayError, pointerToParam, valueAt } from '@gw/core';
import { CountTokensRequestSchema, MessagesRequestSchema, type CountTokensRequest, type MessagesRequest } from '@gw/formats';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { ValueErrorType } from '@sinclair/typebox/errors';

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
  if (!isCalendarDate(v.trim())) {
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

/** TypeBox says "Expected union value" for a bad enum; name the allowed values instead. */
function describe(e: { type: ValueErrorType; message: string; schema: any }): string {
  const options = e.type === ValueErrorType.Union ? (e.schema?.anyOf ?? []) : [];
  if (options.length && options.every((o: any) => o.const !== undefined)) {
    return `must be one of ${options.map((o: any) => JSON.stringify(o.const)).join(', ')}`;
  }
  return e.message;
}

function firstError(check: ReturnType<typeof TypeCompiler.Compile>, body: unknown): never {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new GatewayError(400, 'invalid_type', 'Request body must be a JSON object', { param: '' });
  }
  const e = check.Errors(body).First();
  const path = e?.path ?? '';
  const param = pointerToParam(path);
  if (!e) throw new GatewayError(400, 'invalid_request', 'Invalid request body');
  if (e.type === ValueErrorType.ObjectRequiredProperty || (path && valueAt(body, path) === undefined)) {
    throw new GatewayError(400, 'missing_field', `${param}: field is required`, { param });
  }
  throw new GatewayError(400, codeOf(e.type), `${param || 'body'}: ${describe(e)}`, { param });
}

/** Validates a /v1/messages body; throws 400 naming the first bad field. */
export function validateMessagesBody(body: unknown): MessagesRequest {
  if (messagesCheck.Check(body)) return body;
  firstError(messagesCheck, body);
}

/** Validates a /v1/messages/count_tokens body. */
export function validateCountTokensBody(body: unknown): CountTokensRequest {
  if (countCheck.Check(body)) return body;
  firstError(countCheck, body);
}
