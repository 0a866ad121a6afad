import { describe, expect, test } from 'bun:test';
import { errorEvent, meteredEvent } from './events';

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
