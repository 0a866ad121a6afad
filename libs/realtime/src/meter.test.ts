/**
 * The meter alone, over a quota that records what it is asked: a request the upstream was asked to answer and
 * never did (a forwarded `response.create`, a commit its turn detection answers) is billed once when the session
 * ends; one that never reached the upstream is not. The whole path over real sockets: tests/e2e/realtime-unanswered.test.ts.
 */
import { describe, expect, test } from 'bun:test';
import { GatewayError } from '@gw/core';
import { MAX_CHECKPOINTED, SessionMeter, autoResponseOf } from './meter';
import type { QuotaPort, RealtimeKey, RealtimeUsageLog } from './ports';

const KEY: RealtimeKey = { id: 7, userId: 3, status: 1, expiresAt: null, unlimitedQuota: false, remainQuota: 0 };
const PRICE = { input: 4_000_000, output: 16_000_000, cacheRead: 400_000, audioInput: 32_000_000, audioOutput: 64_000_000, contextWindow: 16_000 };

function meter(o: { refuse?: boolean; later?: boolean } = {}) {
  const settled: Array<{ r: number | null; log: RealtimeUsageLog }> = [];
  const checkpoints: Array<{ r: number; log: RealtimeUsageLog }> = [];
  const released: number[] = [];
  let holds = 0;
  const quota: QuotaPort<RealtimeKey, number> = {
    reserve: () => {
      if (o.refuse) throw new GatewayError(402, 'quota_exhausted', 'Quota exhausted');
      // PostgreSQL mode: the shared store answers after the frame.
      return (o.later ? Bun.sleep(5).then(() => ++holds) : ++holds) as number;
    },
    affords: () => {},
    available: () => 1_000_000_000,
    settleNow: (r, log) => { settled.push({ r, log }); return { cost: 1 }; },
    release: (r) => { released.push(r); },
    checkpoint: (r, log) => { checkpoints.push({ r, log }); },
  };
  const m = new SessionMeter<RealtimeKey, number>({
    sessionId: 'rt_x', plainKey: 'k', key: KEY, model: 'gpt-realtime', ip: '127.0.0.1', defaultOutputTokens: 4096, defaultContextTokens: 16_000,
    minReserve: 1, price: PRICE, group: 'default', ratio: 1000, keys: { lookup: () => KEY }, prices: { get: () => PRICE }, quota,
  });
  m.connected({ channelId: 1, upstreamModel: 'gpt-realtime', url: 'ws://x', headers: {}, scrub: (t) => t });
  return { m, settled, released, checkpoints, holds: () => holds };
}

const VAD = (create_response?: boolean) => JSON.stringify({ type: 'session.updated', session: { type: 'realtime', audio: { input: { turn_detection: { type: 'server_vad', ...(create_response === undefined ? {} : { create_response }) } } } } });

/** A turn the upstream's detection ends: speech stopped, then the commit it answers by itself. */
const STOPPED = '{"type":"input_audio_buffer.speech_stopped","audio_end_ms":1000,"item_id":"item_1"}';
const turn = (m: { upstream(t: string): unknown }, item = 'item_1') => {
  m.upstream(STOPPED);
  m.upstream(`{"type":"input_audio_buffer.committed","item_id":"${item}"}`);
};

describe('a request the upstream never answered', () => {
  test('a forwarded response.create: billed once at the end on its hold, input on the conversation bound, nothing delivered', () => {
    const { m, settled, released } = meter();
    // Forwarded with an event_id of the gateway's, which an error refusing it names (see below).
    expect(m.client('{"type":"response.create"}')).toEqual({ forward: expect.stringMatching(/^\{"event_id":"evt_gw_\w+","type":"response\.create"\}$/) });
    m.end('client_closed');
    m.end('client_closed');
    expect(settled.length).toBe(1);
    const { r, log } = settled[0]!;
    expect(r).toBe(1);
    expect(log.requestId).toMatch(/^rt_x_unanswered_\d+$/);
    expect(log.usage).toBeNull();
    expect(log.errorCode).toBe('client_closed');
    // 1,024 of formatting plus the create's 26 bytes; output: nothing was delivered.
    expect(log.estimate).toEqual({ output: 0, audioOutput: 0, input: 1024 + 26, audioInput: 0 });
    expect(released).toEqual([]);
    expect(m.responses).toBe(1);
  });

  test('a response.created or response.done read after the end bills nothing more and reserves nothing', () => {
    const { m, settled, holds } = meter();
    m.client('{"type":"response.create"}');
    m.end('client_closed');
    expect(m.upstream('{"type":"response.created","response":{"id":"resp_late","status":"in_progress"}}')).toBeUndefined();
    expect(m.upstream('{"type":"response.done","response":{"id":"resp_late","status":"completed","usage":{"total_tokens":2,"input_tokens":1,"output_tokens":1}}}')).toBeUndefined();
    expect(settled.length).toBe(1);
    expect(holds()).toBe(1);
  });

  test('answered before the end: billed as the response, never again as unanswered', () => {
    const { m, settled } = meter();
    m.client('{"type":"response.create"}');
    m.upstream('{"type":"response.created","response":{"id":"resp_1","status":"in_progress"}}');
    m.end('client_closed');
    expect(settled.map((s) => s.log.requestId)).toEqual(['rt_x_resp_1']);
  });

  test('never sent (the upstream never opened): its hold is given back, nothing billed', () => {
    const { m, settled, released } = meter();
    m.client('{"type":"response.create"}');
    m.end('upstream_unavailable', false);
    expect(settled).toEqual([]);
    expect(released).toEqual([1]);
  });

  test('refused by the gateway (its hold was refused): not forwarded, nothing billed', () => {
    const { m, settled } = meter({ refuse: true });
    expect(m.client('{"type":"response.create"}')).toMatchObject({ refuse: true, code: 'quota_exhausted' });
    m.end('client_closed');
    expect(settled).toEqual([]);
  });

  test('refused by the upstream (an error naming the id it was forwarded under): its hold is given back, nothing billed', () => {
    const { m, settled, released } = meter();
    const sent = m.client('{"type":"response.create","event_id":"evt_1"}') as { forward: string };
    const id = JSON.parse(sent.forward).event_id;
    expect(id).toMatch(/^evt_gw_\w+$/);
    // The client's own id is what the error is relayed with.
    expect(m.clientEventId(id)).toEqual({ id: 'evt_1' });
    m.upstream(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'conversation_already_has_active_response', event_id: id } }));
    m.end('client_closed');
    expect(settled).toEqual([]);
    expect(released).toEqual([1]);
  });

  test('an error naming no event, another one, or the create\'s own client id, frees no create: billed at the end', () => {
    const { m, settled, released } = meter();
    m.client('{"type":"response.create","event_id":"dup"}');
    m.client('{"type":"bogus","event_id":"dup"}');
    m.upstream(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'invalid_value', param: 'type', event_id: null } }));
    m.upstream(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'invalid_value', event_id: 'evt_other' } }));
    m.upstream(JSON.stringify({ type: 'error', error: { type: 'invalid_request_error', code: 'invalid_value', event_id: 'dup' } }));
    expect(m.clientEventId('dup')).toBeUndefined();
    m.end('client_closed');
    expect(settled.map((s) => [s.r, s.log.requestId])).toEqual([[1, 'rt_x_unanswered_2']]);
    expect(released).toEqual([]);
  });

  test('how a create is forwarded: re-serialised as parsed, the gateway\'s id first (in place of its own), a model pin applied', () => {
    const { m, settled, released } = meter();
    const v = m.client(' {"type":"response.create"} ') as { forward: string };
    const id = JSON.parse(v.forward).event_id;
    expect(v.forward).toBe(`{"event_id":"${id}","type":"response.create"}`);
    // A key given twice reaches the upstream once, as the gateway read it.
    const dup = m.client('{"type":"response.create","response":{"max_output_tokens":9},"response":{"conversation":"none"}}') as { forward: string };
    expect(JSON.parse(dup.forward)).toEqual({ event_id: expect.stringMatching(/^evt_gw_/), type: 'response.create', response: { conversation: 'none' } });
    m.upstream(JSON.stringify({ type: 'error', error: { code: 'x', event_id: JSON.parse(dup.forward).event_id } }));
    expect(m.clientEventId(id)).toEqual({ id: null });
    const pinned = m.client('{"type":"response.create","event_id":"mine","response":{"model":"gpt-realtime","max_output_tokens":9}}') as { forward: string };
    expect(JSON.parse(pinned.forward)).toEqual({ event_id: expect.stringMatching(/^evt_gw_/), type: 'response.create', response: { max_output_tokens: 9 } });
    const odd = m.client('{"type":"response.create","event_id":5}') as { forward: string };
    expect(m.clientEventId(JSON.parse(odd.forward).event_id)).toEqual({ id: 5 });
    for (const f of [v, pinned, odd]) m.upstream(JSON.stringify({ type: 'error', error: { code: 'conversation_already_has_active_response', event_id: JSON.parse(f.forward).event_id } }));
    expect(released).toEqual([2, 1, 3, 4]);
    m.end('client_closed');
    expect(settled).toEqual([]);
  });

  test('two in the conversation: one billed (the upstream refuses a create while one runs), the other\'s hold given back', () => {
    const { m, settled, released } = meter();
    m.client('{"type":"response.create"}');
    m.client('{"type":"response.create","response":{"conversation":"auto"}}');
    m.end('client_closed');
    expect(settled.map((s) => s.r)).toEqual([1]);
    expect(released).toEqual([2]);
  });

  test('a create waiting in the conversation and a VAD commit: one billed', () => {
    const { m, settled } = meter();
    m.upstream(VAD());
    m.client('{"type":"response.create"}');
    turn(m);
    m.end('client_closed');
    expect(settled.map((s) => s.r)).toEqual([1]);
  });

  test('several out of band: each billed once, a later one bounded with the earlier ones\' max output (they may have run unseen)', () => {
    const { m, settled } = meter();
    m.client('{"type":"response.create","response":{"conversation":"none","max_output_tokens":100}}');
    m.client('{"type":"response.create","response":{"conversation":"none","max_output_tokens":100}}');
    m.end('client_closed');
    expect(settled.length).toBe(2);
    const [a, b] = settled.map((s) => s.log.estimate as any);
    // Read back as text or audio, not known which: at the dearer (here audio) input price.
    expect([b.input - a.input, b.audioInput - a.audioInput]).toEqual([0, 100]);
  });
});

describe('server VAD: a commit the upstream answers by itself', () => {
  test('committed, then the end before its response.created: billed once, unreserved', () => {
    const { m, settled } = meter();
    m.upstream(VAD());
    turn(m);
    m.end('client_closed');
    expect(settled.length).toBe(1);
    expect(settled[0]!.r).toBeNull();
    expect(settled[0]!.log.requestId).toMatch(/_unanswered_\d+$/);
  });

  test('its response.created answers it: billed as that response only', () => {
    const { m, settled } = meter();
    m.upstream(VAD());
    turn(m);
    m.upstream('{"type":"response.created","response":{"id":"resp_v","status":"in_progress"}}');
    m.end('client_closed');
    expect(settled.map((s) => s.log.requestId)).toEqual(['rt_x_resp_v']);
  });

  test('a create refused while the response its hold went to runs: that response answered the commit, billed once', () => {
    const { m, settled, released } = meter();
    m.upstream(VAD(true));
    const sent = m.client('{"type":"response.create"}') as { forward: string };
    turn(m);
    // The upstream's turn detection started this one first; it takes the waiting create's hold.
    m.upstream('{"type":"response.created","response":{"id":"resp_vad","status":"in_progress"}}');
    m.upstream(JSON.stringify({ type: 'error', error: { code: 'conversation_already_has_active_response', event_id: JSON.parse(sent.forward).event_id } }));
    m.upstream('{"type":"response.done","response":{"id":"resp_vad","status":"completed","usage":{"total_tokens":2,"input_tokens":1,"output_tokens":1}}}');
    m.end('client_closed');
    expect(settled.map((s) => [s.r, s.log.requestId])).toEqual([[1, 'rt_x_resp_vad']]);
    expect(released).toEqual([]);
  });

  test('create_response false, or turn detection off: a commit asks for nothing', () => {
    for (const session of [VAD(false), '{"type":"session.updated","session":{"type":"realtime","audio":{"input":{"turn_detection":null}}}}']) {
      const { m, settled } = meter();
      m.upstream(VAD());
      m.upstream(session);
      turn(m);
      m.end('client_closed');
      expect(settled).toEqual([]);
    }
  });

  test('its response.created whose hold is refused: the session ends, the response is billed unreserved at the end', () => {
    const { m, settled } = meter({ refuse: true });
    m.upstream(VAD());
    turn(m);
    expect(m.upstream('{"type":"response.created","response":{"id":"resp_r","status":"in_progress"}}')).toMatchObject({ closeCode: 1008, code: 'quota_exhausted' });
    m.end('quota_exhausted');
    expect(settled.map((s) => [s.r, s.log.requestId, s.log.errorCode])).toEqual([[null, 'rt_x_resp_r', 'quota_exhausted']]);
  });

  test('a commit the client asked for (no turn ended by the upstream\'s detection) asks for no response, nor does a later one', () => {
    const { m, settled } = meter();
    m.upstream(VAD());
    m.client('{"type":"input_audio_buffer.commit"}');
    m.upstream('{"type":"input_audio_buffer.committed","item_id":"item_1"}');
    // One stop is one turn: the commit after the next is the client's again.
    turn(m, 'item_2');
    m.upstream('{"type":"response.created","response":{"id":"resp_v","status":"in_progress"}}');
    m.upstream('{"type":"input_audio_buffer.committed","item_id":"item_3"}');
    m.end('client_closed');
    expect(settled.map((s) => s.log.requestId)).toEqual(['rt_x_resp_v']);
    // An idle timeout ends a turn too.
    const t = meter();
    t.m.upstream(VAD());
    t.m.upstream('{"type":"input_audio_buffer.timeout_triggered","audio_start_ms":0,"audio_end_ms":5000,"item_id":"item_1"}');
    t.m.upstream('{"type":"input_audio_buffer.committed","item_id":"item_1"}');
    t.m.end('client_closed');
    expect(t.settled.map((s) => s.log.requestId)).toEqual([expect.stringMatching(/_unanswered_\d+$/)]);
  });

  test('many commits with no response: one unanswered at most', () => {
    const { m, settled } = meter();
    m.upstream(VAD());
    for (let i = 0; i < 5; i++) turn(m, `item_${i}`);
    m.end('client_closed');
    expect(settled.length).toBe(1);
  });

  test('autoResponseOf reads GA and beta sessions; absent says nothing', () => {
    expect(autoResponseOf({ audio: { input: { turn_detection: { type: 'semantic_vad' } } } })).toBe(true);
    expect(autoResponseOf({ turn_detection: { type: 'server_vad', create_response: false } })).toBe(false);
    expect(autoResponseOf({ turn_detection: null })).toBe(false);
    expect(autoResponseOf({ audio: { input: { format: { type: 'audio/pcm' } } } })).toBeUndefined();
    expect(autoResponseOf(null)).toBeUndefined();
    // A transcription session commits turns to transcribe, not to answer.
    expect(autoResponseOf({ type: 'transcription', audio: { input: { turn_detection: { type: 'server_vad' } } } })).toBe(false);
    expect(autoResponseOf({ object: 'realtime.transcription_session', turn_detection: { type: 'server_vad' } })).toBe(false);
  });
});

describe('checkpoints (what a crash would bill)', () => {
  const created = (id: string, max?: number) =>
    JSON.stringify({ type: 'response.created', response: { id, status: 'in_progress', ...(max ? { max_output_tokens: max } : {}) } });
  const delta = (id: string) => JSON.stringify({ type: 'response.output_text.delta', response_id: id, delta: 'Hello there' });

  test('an upstream starting many responses at once: at most MAX_CHECKPOINTED of them are kept, the others once one settles', () => {
    const { m, checkpoints } = meter();
    for (let i = 0; i < 200; i++) m.upstream(created(`resp_${i}`, 1));
    for (let i = 0; i < 200; i++) m.upstream(delta(`resp_${i}`));
    const kept = () => new Set(checkpoints.map((c) => c.log.requestId));
    expect(MAX_CHECKPOINTED).toBeLessThanOrEqual(64);
    expect(kept().size).toBe(MAX_CHECKPOINTED);
    // Two writes each (response.created, first output), nothing for the rest.
    expect(checkpoints.length).toBe(2 * MAX_CHECKPOINTED);
    // One settles: the next response with output takes its place.
    m.upstream('{"type":"response.done","response":{"id":"resp_0","status":"completed"}}');
    m.upstream(delta('resp_150'));
    expect(checkpoints.at(-1)!.log.requestId).toBe('rt_x_resp_150');
    expect(kept().size).toBe(MAX_CHECKPOINTED + 1);
    m.end('client_closed');
  });

  test('a checkpoint never bills more input than the same response cut at that moment: responses started after it are not in its input', () => {
    const { m, checkpoints, settled } = meter();
    m.upstream(created('resp_a'));
    // Started later with a large limit: its output can only follow resp_a's input, never be part of it.
    m.upstream(created('resp_b', 8000));
    m.upstream(delta('resp_a'));
    const cp = checkpoints.filter((c) => c.log.requestId === 'rt_x_resp_a').at(-1)!;
    m.end('client_closed');
    const cut = settled.find((s) => s.log.requestId === 'rt_x_resp_a')!;
    // Before, resp_b's 8,000 tokens were billed in resp_a's checkpoint as audio input (the dearest input).
    expect(cp.log.estimate).toEqual(cut.log.estimate!);
    expect(cp.log.estimate!.audioInput).toBe(0);
  });

  test('a response the upstream started whose hold the shared store grants later: checkpointed once granted, with its output so far', async () => {
    const { m, checkpoints, settled } = meter({ later: true });
    m.upstream(created('resp_vad'));
    m.upstream(delta('resp_vad'));
    // The hold is still being decided: nothing to cap a checkpoint by yet.
    expect(checkpoints).toEqual([]);
    await Bun.sleep(20);
    expect(checkpoints.map((c) => [c.r, c.log.requestId, c.log.errorCode, c.log.estimate!.output])).toEqual([[1, 'rt_x_resp_vad', 'gateway_crashed', 3]]); // 'Hello there': 3 tokens
    // From then on as any response: the next output is checkpointed, the settlement takes the granted hold.
    m.upstream(delta('resp_vad'));
    expect(checkpoints).toHaveLength(2);
    m.upstream('{"type":"response.done","response":{"id":"resp_vad","status":"completed"}}');
    expect(settled.map((s) => [s.r, s.log.requestId])).toEqual([[1, 'rt_x_resp_vad']]);
    m.end('client_closed');
    expect(checkpoints).toHaveLength(2);
  });
});
