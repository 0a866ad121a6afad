/**
 * The part of a streamed tool call's arguments that can reach the client: the longest prefix of one JSON object.
 * Anthropic's tool input is always an object, and the SDKs parse every `input_json_delta` as it comes (partial JSON
 * allowed, invalid JSON not): arguments such as `[1,2]`, `null` or `"x"` became an input that is no object, and
 * `{'a': 1}`, `{"a":1} trailing` or two calls run together (`{"a":1}{"b":2}`) made the SDK throw mid-stream and lose
 * the whole answer. A stream cannot take back what it sent, so it stops sending at the first character that cannot
 * continue an object: arguments that do not open one send nothing (the input stays `{}`, as the JSON answer's does),
 * and after the object closes, or a character breaks it, the rest is dropped. A JSON answer's arguments that are
 * no JSON but begin with a whole object are that object, as the same answer streamed is.
 *
 * Arguments cut mid-object (the upstream hit its output limit or ended the stream) are the longest prefix that ends
 * a value, closed (`closeAll()`): `{"city":"Os` is `{"city":"Os"}`, `{"a":1,"b` is `{"a":1}`, in both modes. So a stream
 * sends only up to such a point: a key waits for the first character of its value (a string value then streams as
 * it comes), a number for a character that can end it, a literal or an escape for its end; at most MAX_HELD
 * characters wait (a longer key or run of spaces ends the object there). Before, the partial deltas reached the
 * client as sent, which the SDKs' partial parsers each read their own way, while the JSON answer gave `{}`.
 */

/** Characters held back waiting for a point the object can be closed at; no key or whitespace run needs more. */
const MAX_HELD = 64 * 1024;

type Expect = 'value' | 'firstValue' | 'key' | 'firstKey' | 'colon' | 'next';
type Token = { kind: 'string'; key: boolean; escape: boolean; hex: number } | { kind: 'number'; at: NumberPart } | { kind: 'literal'; word: string; at: number } | null;

/**
 * Where a number token is, one state per character: a regular expression over the token so far made a number of n
 * digits cost n² steps (a hostile upstream's megabytes of digits froze the event loop).
 */
type NumberPart = 'sign' | 'zero' | 'int' | 'dot' | 'frac' | 'e' | 'esign' | 'exp';
const NUMBER_ENDS: ReadonlySet<NumberPart> = new Set(['zero', 'int', 'frac', 'exp']);

/** The part after `c`, or null when `c` cannot continue a number there. */
function numberNext(at: NumberPart, c: string): NumberPart | null {
  const digit = c >= '0' && c <= '9';
  const e = c === 'e' || c === 'E';
  switch (at) {
    case 'sign': return c === '0' ? 'zero' : digit ? 'int' : null;
    case 'zero': return c === '.' ? 'dot' : e ? 'e' : null;
    case 'int': return digit ? 'int' : c === '.' ? 'dot' : e ? 'e' : null;
    case 'dot': return digit ? 'frac' : null;
    case 'frac': return digit ? 'frac' : e ? 'e' : null;
    case 'e': return digit ? 'exp' : c === '+' || c === '-' ? 'esign' : null;
    case 'esign':
    case 'exp': return digit ? 'exp' : null;
  }
}
const WS = new Set([' ', '\t', '\n', '\r']);
const HEX = /^[0-9a-fA-F]$/;
const ESCAPES = new Set(['"', '\\', '/', 'b', 'f', 'n', 'r', 't']);

export class ToolArgsFilter {
  /** Open containers: `{` or `[`. Empty before the object opens and after it closes. */
  private readonly stack: string[] = [];
  private expect: Expect = 'value';
  private token: Token = null;
  /** No more characters are passed: the object closed, or a character could not continue it. */
  private ended = false;
  private opened = false;
  /** Passed characters not sent yet: since the last point the object can be closed at. */
  private held = '';
  /** That point is inside a string value (closing it takes a quote first). */
  private inString = false;

  /** The object opened and closed: what was passed is one whole JSON object. */
  get whole(): boolean {
    return this.opened && !this.stack.length;
  }

  /** The part of `fragment` to send (possibly ""): what was passed, up to the last point the object can be closed at. */
  push(fragment: string): string {
    if (this.ended) return '';
    // Whitespace before the object is not sent: the SDKs parse each delta's sum, and "  " alone is no JSON.
    let start = 0;
    let safeEnd = -1;
    for (let i = 0; i < fragment.length; i++) {
      if (!this.step(fragment[i]!)) {
        this.ended = true;
        break;
      }
      if (!this.opened) start = i + 1;
      else if (this.closable()) {
        safeEnd = i + 1;
        this.inString = this.token?.kind === 'string';
        if (!this.stack.length && !this.token) {
          this.ended = true;
          break;
        }
      }
    }
    let out = '';
    if (safeEnd >= 0) {
      out = this.held + fragment.slice(start, safeEnd);
      this.held = '';
      start = safeEnd;
    }
    if (this.ended) this.held = '';
    else if (this.held.length + fragment.length - start > MAX_HELD) {
      this.ended = true;
      this.held = '';
    } else this.held += fragment.slice(start);
    return out;
  }

  /**
   * What makes everything sent one whole object: the open string value's quote, then the open containers' ends;
   * "" when the object closed or never opened. Nothing is sent after it.
   */
  closeAll(): string {
    this.ended = true;
    this.held = '';
    if (!this.opened || !this.stack.length) return '';
    let s = this.inString ? '"' : '';
    for (let i = this.stack.length - 1; i >= 0; i--) s += this.stack[i] === '{' ? '}' : ']';
    return s;
  }

  /** Whether the characters so far end where the object can be closed without making up a key or a value. */
  private closable(): boolean {
    const t = this.token;
    if (t?.kind === 'string') return !t.key && !t.escape && t.hex === 0;
    if (t?.kind === 'number') return NUMBER_ENDS.has(t.at);
    if (t?.kind === 'literal') return false;
    return this.expect === 'next' || this.expect === 'firstKey' || this.expect === 'firstValue';
  }

  /** Whether `c` continues a JSON object; updates the state when it does. */
  private step(c: string): boolean {
    const t = this.token;
    if (t?.kind === 'string') return this.stringChar(t, c);
    if (t?.kind === 'literal') {
      if (c !== t.word[t.at]) return false;
      if (++t.at === t.word.length) this.endValue();
      return true;
    }
    if (t?.kind === 'number') {
      const next = numberNext(t.at, c);
      if (next) {
        t.at = next;
        return true;
      }
      if (!NUMBER_ENDS.has(t.at)) return false;
      this.endValue();
    }
    if (WS.has(c)) return true;
    switch (this.expect) {
      case 'firstKey':
        if (c === '}') return this.close('{');
      // falls through
      case 'key':
        if (c !== '"') return false;
        this.token = { kind: 'string', key: true, escape: false, hex: 0 };
        return true;
      case 'colon':
        if (c !== ':') return false;
        this.expect = 'value';
        return true;
      case 'next':
        if (c === ',') {
          this.expect = this.stack.at(-1) === '{' ? 'key' : 'value';
          return true;
        }
        return this.close(c === '}' ? '{' : c === ']' ? '[' : '');
      case 'firstValue':
        if (c === ']') return this.close('[');
      // falls through
      case 'value':
        return this.value(c);
    }
  }

  private value(c: string): boolean {
    // The top level is an object, and nothing else.
    if (!this.opened && c !== '{') return false;
    if (c === '{' || c === '[') {
      this.opened = true;
      this.stack.push(c);
      this.expect = c === '{' ? 'firstKey' : 'firstValue';
      return true;
    }
    if (c === '"') this.token = { kind: 'string', key: false, escape: false, hex: 0 };
    else if (c === '-' || (c >= '0' && c <= '9')) this.token = { kind: 'number', at: c === '-' ? 'sign' : c === '0' ? 'zero' : 'int' };
    else if (c === 't' || c === 'f' || c === 'n') this.token = { kind: 'literal', word: c === 't' ? 'true' : c === 'f' ? 'false' : 'null', at: 1 };
    else return false;
    return true;
  }

  private stringChar(t: Extract<Token, { kind: 'string' }>, c: string): boolean {
    if (t.hex > 0) {
      if (!HEX.test(c)) return false;
      t.hex--;
      return true;
    }
    if (t.escape) {
      t.escape = false;
      if (c === 'u') t.hex = 4;
      return c === 'u' || ESCAPES.has(c);
    }
    if (c === '\\') t.escape = true;
    else if (c === '"') {
      this.token = null;
      if (t.key) this.expect = 'colon';
      else this.endValue();
    } else if (c < ' ') return false; // control characters must be escaped inside a JSON string
    return true;
  }

  private close(open: string): boolean {
    if (!open || this.stack.at(-1) !== open) return false;
    this.stack.pop();
    this.endValue();
    return true;
  }

  private endValue(): void {
    this.token = null;
    this.expect = 'next';
  }
}
