/**
 * The first problem of a body against a TypeBox schema, worded as Anthropic's API words it
 * (`messages.1.role: Input should be 'user' or 'assistant'`, `max_tokens: Field required`). Clients key
 * their recovery on that wording (Claude Code resends without a system turn only when the error reads
 * like Anthropic's), so the gateway's own errors follow it.
 *
 * TypeBox reports a union's failure at the union ("Expected union value"); the useful error is usually
 * inside the branch the value was meant for (the array branch of `content`, the `text` branch of a block
 * whose `type` is "text"), so the search descends into that branch.
 */
import type { TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { ValueErrorType, type ValueError } from '@sinclair/typebox/errors';

export interface SchemaIssue {
  /** JSON pointer of the offending value, e.g. `/messages/0/role`. */
  pointer: string;
  type: ValueErrorType;
  /** Anthropic-style message without the path, e.g. `Field required`. */
  message: string;
}

const kindOf = (s: any): string | undefined => (s?.const !== undefined ? 'literal' : s?.type);

/** The union branch `value` was evidently meant for, if one can be told. */
function branchFor(options: any[], value: unknown): TSchema | undefined {
  if (Array.isArray(value)) return options.find((o) => kindOf(o) === 'array');
  if (value !== null && typeof value === 'object') {
    const tag = (value as { type?: unknown }).type;
    const tagged = options.find((o) => o?.properties?.type?.const !== undefined && o.properties.type.const === tag);
    if (tagged) return tagged;
    const objects = options.filter((o) => kindOf(o) === 'object');
    return objects.length === 1 ? objects[0] : undefined;
  }
  return undefined;
}

const quote = (v: unknown) => (typeof v === 'string' ? `'${v}'` : JSON.stringify(v));
/** pydantic's list wording: `'a' or 'b'`, `'a', 'b' or 'c'`. */
const orList = (xs: string[]) => (xs.length < 2 ? xs.join('') : `${xs.slice(0, -1).join(', ')} or ${xs.at(-1)}`);

const TYPE_WORDS: Record<string, string> = {
  array: 'a valid list', string: 'a valid string', integer: 'a valid integer', number: 'a valid number',
  boolean: 'a valid boolean', object: 'a valid dictionary', null: 'None',
};

function unionMessage(options: any[]): string {
  if (options.every((o) => o?.const !== undefined)) return `Input should be ${orList(options.map((o) => quote(o.const)))}`;
  // Anthropic names the richer form of a string-or-list field (content, system): "a valid list".
  const kinds = options.map(kindOf);
  const kind = kinds.includes('array') ? 'array' : kinds.find((k) => k !== 'null') ?? kinds[0];
  return `Input should be ${TYPE_WORDS[kind!] ?? 'valid'}`;
}

function describe(e: ValueError): string {
  const s = e.schema as any;
  switch (e.type) {
    case ValueErrorType.ObjectRequiredProperty: return 'Field required';
    case ValueErrorType.Union: return unionMessage(s.anyOf ?? []);
    case ValueErrorType.Literal: return `Input should be ${quote(s.const)}`;
    case ValueErrorType.NumberMinimum: case ValueErrorType.IntegerMinimum: return `Input should be greater than or equal to ${s.minimum}`;
    case ValueErrorType.NumberMaximum: case ValueErrorType.IntegerMaximum: return `Input should be less than or equal to ${s.maximum}`;
    case ValueErrorType.NumberExclusiveMinimum: case ValueErrorType.IntegerExclusiveMinimum: return `Input should be greater than ${s.exclusiveMinimum}`;
    case ValueErrorType.NumberExclusiveMaximum: case ValueErrorType.IntegerExclusiveMaximum: return `Input should be less than ${s.exclusiveMaximum}`;
    case ValueErrorType.ArrayMinItems: return `List should have at least ${s.minItems} item${s.minItems === 1 ? '' : 's'} after validation, not ${(e.value as unknown[]).length}`;
    case ValueErrorType.ArrayMaxItems: return `List should have at most ${s.maxItems} item${s.maxItems === 1 ? '' : 's'} after validation, not ${(e.value as unknown[]).length}`;
    case ValueErrorType.StringMinLength: return `String should have at least ${s.minLength} character${s.minLength === 1 ? '' : 's'}`;
    case ValueErrorType.StringMaxLength: return `String should have at most ${s.maxLength} character${s.maxLength === 1 ? '' : 's'}`;
    case ValueErrorType.StringPattern: return `String should match pattern '${s.pattern}'`;
    case ValueErrorType.Integer:
      return typeof e.value === 'number' && Number.isFinite(e.value) ? 'Input should be a valid integer, got a number with a fractional part' : 'Input should be a valid integer';
    case ValueErrorType.Number: case ValueErrorType.String: case ValueErrorType.Boolean: case ValueErrorType.Array:
    case ValueErrorType.Object: case ValueErrorType.Null:
      return `Input should be ${TYPE_WORDS[s.type] ?? 'valid'}`;
    default: return e.message;
  }
}

/** The first issue of `value` against `schema` (its pointer relative to `base`), or null when valid. */
export function firstIssue(schema: TSchema, value: unknown, base = ''): SchemaIssue | null {
  const e = Value.Errors(schema, value).First();
  if (!e) return null;
  if (e.type === ValueErrorType.Union) {
    const branch = branchFor((e.schema as any).anyOf ?? [], e.value);
    const inner = branch && firstIssue(branch, e.value, base + e.path);
    if (inner) return inner;
  }
  return { pointer: base + e.path, type: e.type, message: describe(e) };
}
