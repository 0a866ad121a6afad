import { describe, expect, test } from 'bun:test';
import { otherTypeKeyAfter } from './ambiguous';
import { errorEvent, meteredEvent, plainAppend, scrubbedErrorEvent } from './events';

describe('meteredEvent', () => {
  test('reads the three metered types, in any key order and spacing', () => {
    expect(meteredEvent('{"type":"response.done","response":{"id":"r1"}}')?.event.response.id).toBe('r1');
    expect(meteredEvent('{"event_id":"e","type":"response.created","response":{"id":"r2"}}')?.type).toBe('response.created');
    expect(meteredEvent('{ "type" : "response.create" }')?.type).toBe('response.create');
    expect(meteredEvent('{"type":"error","error":{"code":"x"}}')?.event.error.code).toBe('x');
  });

  test('reads the transcription and audio-buffer events a cut session bills on, in any key order', () => {
    expect(meteredEvent('{"type":"input_audio_buffer.committed","item_id":"i1"}')?.event.item_id).toBe('i1');
    expect(meteredEvent('{"item_id":"i2","type":"input_audio_buffer.committed"}')?.type).toBe('input_audio_buffer.committed');
    expect(meteredEvent('{"item_id":"i3","type":"conversation.item.input_audio_transcription.failed"}')?.type).toBe('conversation.item.input_audio_transcription.failed');
    expect(meteredEvent('{"item_id":"i4","delta":"x","type":"conversation.item.input_audio_transcription.delta"}')?.event.delta).toBe('x');
  });

  test('ignores everything else without parsing it', () => {
    expect(meteredEvent('{"type":"response.output_audio.delta","delta":"AAAA"}')).toBeUndefined();
    expect(meteredEvent('{"type":"input_audio_buffer.append","audio":"response.done"}')).toBeUndefined();
    expect(meteredEvent('{"delta":"say \\"response.done\\"","type":"response.output_text.delta"}')).toBeUndefined();
    expect(meteredEvent('not json "response.done"')).toBeUndefined();
    expect(meteredEvent('"response.done"')).toBeUndefined();
  });
});

test('errorEvent has the realtime error shape', () => {
  const e = JSON.parse(errorEvent('billing_error', 'quota_exhausted', 'no money'));
  expect(e.type).toBe('error');
  expect(e.event_id).toMatch(/^event_gw_/);
  expect(e.error).toEqual({ type: 'billing_error', code: 'quota_exhausted', message: 'no money', param: null, event_id: null });
});

describe('plainAppend (the client frames not bounded by REALTIME_MAX_EVENT_BYTES)', () => {
  const audio = 'QUJD'.repeat(1000);
  test('an append with its usual keys is plain', () => {
    expect(plainAppend(`{"type":"input_audio_buffer.append","event_id":"e1","audio":"${audio}"}`)).toBe(true);
  });
  test('another event, another key order, an escape, a second type key (any case) or many keys are not', () => {
    expect(plainAppend(`{"type":"session.update","audio":"${audio}"}`)).toBe(false);
    expect(plainAppend(`{"audio":"${audio}","type":"input_audio_buffer.append"}`)).toBe(false);
    expect(plainAppend(`{"type":"input_audio_buffer.append","audio":"${audio}\\u0041"}`)).toBe(false);
    expect(plainAppend(`{"type":"input_audio_buffer.append","audio":"${audio}","type":"response.create"}`)).toBe(false);
    expect(plainAppend(`{"type":"input_audio_buffer.append","audio":"${audio}","TYPE":"response.create"}`)).toBe(false);
    const keys = Array.from({ length: 20 }, (_, i) => `"k${i}":1`).join(',');
    expect(plainAppend(`{"type":"input_audio_buffer.append",${keys},"audio":"${audio}"}`)).toBe(false);
  });
});

test('otherTypeKeyAfter: "type" in another ASCII case as a key, not the exact spelling nor a near word', () => {
  for (const k of ['TYPE', 'Type', 'tYpE', 'typE']) expect(otherTypeKeyAfter(`{"type":"a","${k}":"b"}`, 10)).toBe(true);
  for (const k of ['type', 'typo', 'types', 'ty pe']) expect(otherTypeKeyAfter(`{"type":"a","${k}":"b"}`, 10)).toBe(false);
  expect(otherTypeKeyAfter('"'.repeat(100_000), 0)).toBe(false);
});

test('scrubbedErrorEvent keeps every key of an upstream error as JSON.parse read it, __proto__ included', () => {
  const text = '{"type":"error","error":{"message":"m","__proto__":{"a":1},"constructor":"c"}}';
  expect(JSON.parse(scrubbedErrorEvent(text, (t) => t))).toEqual(JSON.parse(text));
});
