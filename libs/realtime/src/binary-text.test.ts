import { describe, expect, test } from 'bun:test';
import { binaryAsText } from './binary-text';

const ev = '{"type":"session.update"}';
const utf32 = (t: string, le: boolean) => {
  const b = Buffer.alloc(t.length * 4);
  for (let i = 0; i < t.length; i++) le ? b.writeUInt32LE(t.charCodeAt(i), i * 4) : b.writeUInt32BE(t.charCodeAt(i), i * 4);
  return b;
};

describe('binaryAsText: what Python json.loads(bytes) decodes a frame to', () => {
  test('UTF-8 (with or without a BOM), UTF-16 and UTF-32 in either order, with or without a BOM, leading whitespace', () => {
    for (const b of [
      Buffer.from(ev), Buffer.from(` \n${ev}`), Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(ev)]),
      Buffer.from(ev, 'utf16le'), Buffer.from(ev, 'utf16le').swap16(), Buffer.concat([Buffer.from([0xfe, 0xff]), Buffer.from(ev, 'utf16le').swap16()]),
      utf32(ev, true), utf32(ev, false), Buffer.concat([Buffer.from([0xff, 0xfe, 0, 0]), utf32(ev, true)]),
    ]) expect(binaryAsText(b)?.trim()).toBe(ev);
  });

  test('audio and other bytes are not decoded', () => {
    expect(binaryAsText(Buffer.alloc(4800))).toBeNull();
    expect(binaryAsText(Buffer.from([1, 2, 3, 4, 0x7b]))).toBeNull();
    expect(binaryAsText(Buffer.from('[1]'))).toBeNull();
    expect(binaryAsText(Buffer.alloc(0))).toBeNull();
  });
});
