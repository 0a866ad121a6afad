import { describe, expect, test } from 'bun:test';
import { cell, col, jsonText, pageFooter, table, time } from './output';

describe('table', () => {
  test('aligns columns, right-aligns numbers, shows - for empty values', () => {
    const out = table([{ id: 1, name: 'a', n: null }, { id: 12, name: 'long name', n: [] }], [col('ID', 'id', { right: true }), col('NAME', 'name'), col('N', 'n')]);
    expect(out).toBe('ID  NAME       N\n 1  a          -\n12  long name  -\n');
  });

  test('control characters in values cannot drive the terminal', () => {
    expect(cell('evil\u001b[2Jname\nx')).toBe('evil [2Jname x');
  });

  test('bidi overrides cannot reverse a line; --json escapes them and keeps the value', () => {
    expect(cell('a\u202eb\u2066c\u2028d\u009be')).toBe('a b c d e');
    const json = jsonText({ name: 'a\u202eb\u009b\u001b' });
    expect(json).toBe('{"name":"a\\u202eb\\u009b\\u001b"}');
    expect(JSON.parse(json).name).toBe('a\u202eb\u009b\u001b');
  });

  test('wide characters count as two columns', () => {
    expect(table([{ a: '日本', b: 1 }, { a: 'ab', b: 2 }], [col('A', 'a'), col('B', 'b')])).toBe('A     B\n日本  1\nab    2\n');
  });

  test('no rows, times and footer', () => {
    expect(table([], [col('A', 'a')])).toBe('(none)\n');
    expect(time(0)).toBe('-');
    expect(time(1893456000)).toBe('2030-01-01 00:00:00');
    expect(pageFooter({ total: 41, page: 2, page_size: 20 })).toBe('page 2/3, 41 total\n');
  });
});
