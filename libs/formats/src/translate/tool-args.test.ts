import { describe, expect, test } from 'bun:test';
import { ToolArgsFilter } from './tool-args';

/** What the filter passes of `fragments`, joined. */
const pass = (...fragments: string[]) => {
  const f = new ToolArgsFilter();
  return fragments.map((p) => f.push(p)).join('');
};

describe('ToolArgsFilter: the longest prefix of one JSON object', () => {
  test('a valid object passes whole, however it is split (mid-escape, mid-number, mid-literal)', () => {
    const json = '{"a":"x\\u00e9\\"y","b":[1,-2.5e+3,true,false,null,{}],"c":{"d":[]}, "e" : 0}';
    expect(pass(json)).toBe(json);
    expect(pass(...json.split(''))).toBe(json);
    expect(JSON.parse(pass(json.slice(0, 13), json.slice(13, 30), json.slice(30)))).toEqual(JSON.parse(json));
  });
  test('arguments that are not an object send nothing', () => {
    for (const a of ['[1,2]', 'null', '"x"', '5', 'garbage', 'true']) expect(pass(a)).toBe('');
  });
  test('leading whitespace is held until the object opens', () => {
    expect(pass('  ', '\n{"a":1}')).toBe('{"a":1}');
    expect(pass('   ')).toBe('');
  });
  test('after the object closes, the rest is dropped (trailing text, a second object)', () => {
    expect(pass('{"a":1} trailing')).toBe('{"a":1}');
    expect(pass('{"a":1}', '{"b":2}')).toBe('{"a":1}');
    expect(pass('{"a":1', '0}  ', 'x')).toBe('{"a":10}');
  });
  test('a character that cannot continue the object ends it at the last point it can be closed at', () => {
    expect(pass("{'a': 1}")).toBe('{');
    expect(pass('{"a":1 x}')).toBe('{"a":1 ');
    expect(pass('{"a":tru', 'e', 'x}')).toBe('{"a":true');
    expect(pass('{"a":01}')).toBe('{"a":0');
    expect(pass('{"a":"\\q"}')).toBe('{"a":"');
    expect(pass('{"a":"\\u12g4"}')).toBe('{"a":"');
    expect(pass('{"a":[1}')).toBe('{"a":[1');
    expect(pass('{"a" 1}')).toBe('{');
    expect(pass('{"a":"x\ny"}')).toBe('{"a":"x');
    expect(pass('{"a":-.5}')).toBe('{');
    expect(pass('{"a":1.e5}')).toBe('{"a":1');
    expect(pass('{"a":1e+}')).toBe('{"a":1');
  });
  test('cut mid-object: what was sent and closeAll() make one object, the longest prefix ending a value', () => {
    const closed = (...fragments: string[]) => {
      const f = new ToolArgsFilter();
      const sent = fragments.map((p) => f.push(p)).join('');
      return { sent, object: JSON.parse(sent + f.closeAll()) };
    };
    expect(closed('{"city": "Os')).toEqual({ sent: '{"city": "Os', object: { city: 'Os' } });
    expect(closed('{"a":1,', '"b"', ':').object).toEqual({ a: 1 });
    expect(closed('{"a":1,"b":').sent).toBe('{"a":1');
    expect(closed('{"a":[1,{"b":[true,', 'nu').object).toEqual({ a: [1, { b: [true] }] });
    expect(closed('{"a":"x\\', 'n\\u00').object).toEqual({ a: 'x\n' });
    expect(closed('{"a":12', '3').object).toEqual({ a: 123 });
    expect(closed('{"a":1.', '5e').object).toEqual({ a: 1.5 });
    expect(closed('{"a":1} more')).toEqual({ sent: '{"a":1}', object: { a: 1 } });
    for (const a of ["{'a': 1}", '{"a":"x\ny"}', '{"a":-.5}', '{"a" 1}', '{']) expect(typeof closed(a).object).toBe('object');
    // Nothing opened: nothing sent, nothing to close (the input stays the block's {}).
    const f = new ToolArgsFilter();
    expect(f.push('[1,2]') + f.closeAll()).toBe('');
  });
  test('a key or whitespace held past 64 KiB ends the object where it could be closed', () => {
    const f = new ToolArgsFilter();
    expect(f.push('{"a":1,"' + 'k'.repeat(70_000))).toBe('{"a":1');
    expect(f.push('":2}')).toBe('');
    expect(JSON.parse('{"a":1' + f.closeAll())).toEqual({ a: 1 });
  });
  test('a number of a million digits costs linear time (a hostile upstream cannot stall the event loop with one)', () => {
    // Checked against the whole token on every character, 10^5 digits took minutes; one state per character, milliseconds.
    const digits = '7'.repeat(1_000_000);
    const t0 = performance.now();
    const out = pass('{"a":', digits.slice(0, 400_000), digits.slice(400_000), '}');
    expect(out.length).toBe(1_000_000 + 6);
    expect(performance.now() - t0).toBeLessThan(3_000);
  });
});
