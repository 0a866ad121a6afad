/**
 * Per-session billing: a reservation is held before each response (when the client sends
 * `response.create`, or when the upstream announces a response it started itself, e.g. server VAD)
 * and settled with the usage of its `response.done`; a response the session's end cuts short is settled
 * then, on what it delivered (delivered.ts) and what its conversation can hold (context.ts); so is a response
 * the upstream was asked for and never answered (a forwarded `response.create`, a turn its server VAD ends and answers:
 * the upstream read the conversation), and an input transcription the upstream started and did not report
 * (transcription.ts). What never reached the upstream (a refused create, one the upstream never opened for) is
 * not billed. Frames are only read, never changed, except a client event naming a model (model-pin.ts: the
 * session keeps the model it was admitted with).
 *
 * A response's reservation is what it can cost: the context window at the dearest input price plus its
 * max output tokens at the dearest output price, and its charge never exceeds that reservation (billing
 * validates and bounds the usage). A `response.create` the balance cannot cover is refused with an error
 * event and not forwarded; once the balance is spent the session ends (1008).
 *
 * The quota may answer later (PostgreSQL: a reservation held across nodes, a settlement committed by
 * group commit). A promised reservation for a `response.create` holds that frame (and the client frames
 * after it) until it is decided; one for an upstream-started response is awaited by its settlement. A
 * promised settlement holds the `response.done` (and the upstream frames after it) until it commits, so
 * the client never sees a response end that a crash could leave unbilled, exactly as on SQLite; a failed
 * commit ends the session (1011), as a failed write does there. The session record waits for the
 * session's last commits (`idle()`), so its cost is theirs.
 */
import { GatewayError, nowSeconds, randomToken, stdLogger, type Logger } from '@gw/core';
import { estimateTextTokens } from '@gw/formats';
import { DeliveredOutput, outputAudioRate, type DeliveredTokens } from './delivered';
import { AMBIGUOUS_MESSAGE, ambiguousKey } from './ambiguous';
import { CLIENT_EVENT_MAX_DEPTH, meteredEvent } from './events';
import { modelChangeRefusal, pinModel } from './model-pin';
import { ConversationBound, inputEstimate } from './context';
import {
  PendingTranscriptions, TRANSCRIPTION_DELTA, TRANSCRIPTION_DONE, TRANSCRIPTION_FAILED, audioTokensOf, transcriptionModelOf, transcriptionNotAllowed,
  transcriptionRefusal, transcriptionUsage,
  type PendingTranscription,
} from './transcription';
import type { KeyLookup, KeyPolicy, PriceSource, QuotaPort, RealtimeKey, RealtimeUsageLog } from './ports';
import { INTERNAL_FAILURE, type ClientVerdict, type FrameObserver, type FrameRewrite, type SessionFailure, type UpstreamTarget } from './session';
import { ok, reservationFor, tokensOf, type RealtimePrice } from './usage';
import { responseUsage } from './billed-usage';
import { storedId, storedText } from './stored-id';

export interface MeterOptions<K extends RealtimeKey, R> {
  sessionId: string;
  plainKey: string;
  key: K;
  model: string;
  ip: string;
  /** Max output tokens of a response when neither the session nor the response sets one (REALTIME_RESERVE_TOKENS). */
  defaultOutputTokens: number;
  /** Context window when the price row sets none (BILLING_DEFAULT_CONTEXT_TOKENS). */
  defaultContextTokens: number;
  /** Smallest reservation (BILLING_MIN_RESERVE). */
  minReserve: number;
  /** Price at admission; used when the price book no longer has the model. */
  price: RealtimePrice;
  /** The session's group and its price ratio (per-mille), applied to reservations and charges. */
  group: string;
  ratio: number;
  keys: KeyLookup<K>;
  /**
   * The key policy of admission (status, owner, model and IP allow-lists), applied again to each response's hold:
   * an operator narrowing a key's allow-lists stops its open sessions' next response, as on /v1/messages.
   */
  policy?: KeyPolicy<K>;
  prices: PriceSource;
  quota: QuotaPort<K, R>;
  /** Where failures off the frame path go (a refused hold's unexpected error, a failed commit). */
  log?: Logger;
}

interface Held<R> {
  /**
   * A promise while the quota decides (it rejects with a 402 when the response cannot be covered); null for a
   * response the upstream started itself whose hold was refused (it ran all the same: billed unreserved).
   */
  r: R | Promise<R> | null;
  at: number;
  limits: Limits;
  /** The event_id the `response.create` was forwarded under (the gateway's, named()), which an `error` refusing it names. */
  eventId?: string;
  /** Handed to a settlement (which ends it): never released as well. */
  billed?: boolean;
  /** A create outside the default conversation (`response.conversation` set and not "auto"), which may run alongside another response. */
  outOfBand?: boolean;
}

interface Limits { maxInput: number; maxOutput: number; input: number }

/**
 * The max output tokens an event's settings allow: the largest over both names an upstream may honour
 * (GA `max_output_tokens`, beta `max_response_output_tokens`), "inf" counting as `inf`. Reading only one
 * of them let a client name a small limit under the name the upstream ignores and be billed up to it.
 * A value that is present but not a positive safe integer (4096.5, "4096", 1e300, 0) counts as "inf": an
 * upstream that reads it its own way (truncating, or falling back to its maximum) must not be billed below
 * what it produced. Undefined when neither name is present.
 */
function maxOutputOf(o: unknown, inf: number): number | undefined {
  if (!o || typeof o !== 'object') return undefined;
  let best: number | undefined;
  for (const v of [(o as any).max_output_tokens, (o as any).max_response_output_tokens]) {
    if (v === undefined || v === null) continue;
    const n = typeof v === 'number' && Number.isSafeInteger(v) && v > 0 ? v : inf;
    best = Math.max(best ?? 0, n);
  }
  return best;
}

/**
 * Whether a session object (GA `audio.input.turn_detection`, beta `turn_detection`) has the upstream create a
 * response by itself on each committed turn: turn detection on and its `create_response` not false (OpenAI's
 * default is true); never in a transcription session. Undefined when the object does not say (the last confirmed setting stands).
 */
export function autoResponseOf(session: unknown): boolean | undefined {
  if (!session || typeof session !== 'object') return undefined;
  const s = session as any;
  // A transcription session's turn detection commits audio to transcribe and creates no response.
  if (s.type === 'transcription' || (typeof s.object === 'string' && s.object.includes('transcription'))) return false;
  const input = s.audio?.input;
  const td = input && typeof input === 'object' && 'turn_detection' in input ? input.turn_detection : 'turn_detection' in s ? s.turn_detection : undefined;
  if (td === undefined) return undefined;
  return !!td && typeof td === 'object' && td.create_response !== false;
}

/** What a response is billed on when it has no response.done: its output so far, and an input bound. */
interface ChargeBasis { delivered: DeliveredTokens & { input?: number; audioInput?: number }; errorCode: string; status?: number }

/** Longest a running response's checkpoint lags its relayed output (checkpointOutput). */
export const CHECKPOINT_MS = 1000;

/**
 * Most running responses of one session with a checkpoint at once. A conversation runs one response at a time (plus
 * the client's out-of-band ones); an upstream starting thousands would otherwise cost a SQLite write per
 * response.created, a row each, and one write per response per second while they stream. One past it is
 * checkpointed once another settles (at its next output); a crash before then bills it nothing.
 */
export const MAX_CHECKPOINTED = 16;

/**
 * Most work of one session the upstream has started and not reported at once, of each kind: responses with output
 * relayed and no response.done, responses started (response.created) and not done, and committed items transcribing
 * with no completion. Each is kept (its output
 * counted) until its report or the session's end bills it. An upstream sending deltas under a new, never-announced
 * id each time had 20,000 of them kept (68 MB), and the session's end billed them one after another for 70 s, each on
 * the whole conversation bound; 20,000 commits never transcribed held 77 MB and wrote 20,000 rows at the end. A
 * conversation runs one response at a time (plus the client's out-of-band ones, each on a hold) and transcribes each
 * turn in seconds: past this the upstream is not speaking the protocol, and the session ends (protocolFailure).
 */
export const MAX_OPEN_OUTPUTS = 64;

const protocolFailure = (what: string): SessionFailure => ({
  closeCode: 1011, reason: 'upstream protocol error', type: 'api_error', code: 'upstream_protocol_error',
  message: `The upstream left more than ${MAX_OPEN_OUTPUTS} ${what} unreported at once; the session was ended`,
});
const TOO_MANY_RESPONSES = protocolFailure('responses with output');
const TOO_MANY_STARTED = protocolFailure('responses started');
const TOO_MANY_TRANSCRIPTIONS = protocolFailure('committed items transcribing');

/** The error code of a response billed from its checkpoint after the process died running it. */
export const CRASH_CAUSE = 'gateway_crashed';

/** The error an upstream refuses a response.create with while the conversation has a response running (OpenAI's code). */
const ACTIVE_RESPONSE = 'conversation_already_has_active_response';

/** Creates whose client event_id an upstream error is relayed with (older ones' errors name the gateway's id). */
const CLIENT_IDS_KEPT = 256;

/** Longest client event_id kept to name back in an upstream error (OpenAI's are ~30 characters). */
const CLIENT_ID_MAX = 256;
/**
 * The client's event_id as the gateway keeps it for a relayed error: a string up to CLIENT_ID_MAX characters, a number
 * or a boolean; anything else as none (null). Kept whole, a 16 MB id (or object) times CLIENT_IDS_KEPT creates held
 * gigabytes per session.
 */
const keptId = (v: unknown): unknown =>
  (typeof v === 'string' ? (v.length <= CLIENT_ID_MAX ? v : null) : typeof v === 'number' || typeof v === 'boolean' ? v : null);

/** Closing because money or the key ran out is a policy close (1008). */
const policyFailure = (code: string, message: string, type = 'billing_error'): SessionFailure =>
  ({ closeCode: 1008, reason: code === 'quota_exhausted' ? 'quota exhausted' : code.replace(/_/g, ' '), type, code, message });

/**
 * A reservation the quota refused, under the quota's own code (`quota_exhausted`, `key_quota_exhausted`,
 * `key_budget_exceeded`, `user_budget_exceeded`, `budget_exceeded`): the codes `/v1/messages` answers for the same
 * cause, so a client tells a spent key budget from an empty balance alike on both.
 */
const moneyFailure = (e: GatewayError): SessionFailure => policyFailure(e.code, e.message || 'Quota exhausted');

export class SessionMeter<K extends RealtimeKey, R> implements FrameObserver {
  /** Reservations made for client `response.create`s, waiting for their `response.created`. */
  private queued: Held<R>[] = [];
  /** Reservations of running responses, by response id. */
  private running = new Map<string, Held<R>>();
  private target: UpstreamTarget | null = null;
  /**
   * The session's max output tokens as the upstream applied it (session.created/updated). A client's
   * session.update may raise it at once (over-reserving is safe) but lowers it only once the upstream
   * confirms: an update the upstream rejects or ignores must not shrink what a response is billed for.
   */
  private sessionMaxOutput: number;
  /** Client session.updates not yet answered by a session.updated. */
  private pendingUpdates = 0;
  private seq = 0;
  /** Settlements handed to the quota and not yet committed (durable mode). */
  private readonly inFlight = new Set<Promise<void>>();
  /** Ends the session from outside a frame (given by the relay session at open). */
  private fail: (f: SessionFailure) => void = () => {};
  /** The session ended: a reservation decided after this is given back at once. */
  private ended = false;
  /** Output each response delivered, billed on its estimate if the session ends before its response.done. */
  private readonly delivered = new DeliveredOutput();
  /** Responses billed: a response.done repeated (or arriving after the estimate) is never billed twice. */
  private readonly settled = new Set<string>();
  /**
   * Responses billed on a response.done that came before their response.created: that late response.created (and any
   * copy of it) is theirs, already billed. Any other response.created naming a billed id starts a new response.
   */
  private readonly doneFirst = new Set<string>();
  /** How many responses an upstream that reuses ids has started under one id (absent: one), so each is billed under a request id of its own. */
  private readonly reused = new Map<string, number>();
  /** Responses billed before their response.created whose late response.created came: output named after it is theirs. */
  private readonly lateCreated = new Set<string>();
  /**
   * When each running response was last checkpointed (checkpoint()), whether output was relayed by then, and the
   * timer of the next one while output relayed since waits for it.
   */
  private readonly checkpoints = new Map<string, { at: number; output: boolean; next?: ReturnType<typeof setTimeout> }>();
  /** The latest response started: the owner of a delta that names none. */
  private lastStarted = '';
  /** The input transcription model the upstream last confirmed (null: off); each transcription bills at its price. */
  private transcription: string | null = null;
  /** What the conversation can hold: the input a response cut before its response.done is billed on. */
  private readonly context = new ConversationBound();
  /** Transcriptions the upstream started (a committed audio item) and has not reported yet. */
  private readonly transcribing = new PendingTranscriptions();
  /** The upstream's turn detection creates a response on each commit (server/semantic VAD, `create_response` not false), as last confirmed. */
  private autoResponse = false;
  /**
   * A commit under `autoResponse` whose response has not been seen yet: the upstream was asked to respond (by
   * itself), so a session ending before its response.created bills it as unanswered. At most one: a conversation
   * runs one response at a time, and a commit that started none must not add up over a long session.
   */
  private autoPending = false;
  /**
   * The upstream's turn detection ended a turn (`input_audio_buffer.speech_stopped`, or `timeout_triggered` when
   * it commits on idle), so its next commit is one it answers by itself; a commit without one is the client's.
   */
  private turnEnded = false;
  /**
   * A response started on a create's hold while a commit of the turn detection was pending: it answered either that
   * create or the commit, and the gateway cannot tell which. An unnamed refusal tells: the upstream answers events in
   * order, so a refusal coming now is about that create (the oldest one not answered), and the response was the turn's.
   */
  private turnOrCreate = false;
  /** The event_id each recent create was sent with (null: none), by the one the gateway forwarded it under. */
  private readonly clientIds = new Map<string, unknown>();
  responses = 0;
  cost = 0;

  constructor(private readonly o: MeterOptions<K, R>) {
    this.sessionMaxOutput = o.defaultOutputTokens;
  }

  /** Responses started and not billed yet: the ones a client leaving would cut (session.ts cancels them and reads their report). */
  unfinished(): string[] {
    return [...this.running.keys()].filter((id) => id && !this.settled.has(id));
  }

  attach(fail: (f: SessionFailure) => void): void {
    this.fail = fail;
  }

  connected(target: UpstreamTarget): void {
    this.target = target;
  }

  client(text: string): ClientVerdict | Promise<ClientVerdict> {
    // Every client event, not only a response's hold: audio appended to a transcription session (or one transcribing
    // its input) is paid work too, and a key narrowed, disabled or expired mid-session ran such a session until its end.
    const refused = this.keyRefusal();
    if (refused) return refused;
    this.context.client(text);
    const m = meteredEvent(text, true);
    if (m === 'too_deep') return TOO_DEEP;
    if (m === 'invalid_json') return INVALID_JSON;
    if (m && 'ambiguous' in m) return ambiguous(m.ambiguous);
    if (m?.type === 'transcription_session.update') {
      const odd = ambiguousKey(m.event, 'session');
      if (odd !== undefined) return ambiguous(odd);
      // Forwarded as parsed, as a session.update is: a merging parser must not read a model from a copy JSON.parse dropped.
      return this.transcriptionAllowed(m.event.session) ?? { forward: JSON.stringify(m.event) };
    }
    if (m?.type !== 'session.update' && m?.type !== 'response.create') return undefined;
    const field = m.type === 'session.update' ? 'session' : 'response';
    const odd = ambiguousKey(m.event, field);
    if (odd !== undefined) return ambiguous(odd);
    const pin = pinModel(m.event, field, this.o.model);
    if (pin && 'refuse' in pin) return modelChangeRefusal(this.o.model, pin.refuse);
    if (m.type === 'session.update') {
      const refused = this.transcriptionAllowed(m.event.session);
      if (refused) return refused;
      this.pendingUpdates++;
      this.context.session(m.event.session);
      const v = maxOutputOf(m.event.session, this.o.defaultOutputTokens);
      if (v !== undefined) this.sessionMaxOutput = Math.max(this.sessionMaxOutput, v);
      // Forwarded as parsed: a key given twice reaches the upstream once, as the gateway read it (a merging parser
      // would otherwise take a model, or a limit, from the copy JSON.parse dropped).
      return pin ?? { forward: JSON.stringify(m.event) };
    }
    const own = maxOutputOf(m.event.response, this.o.defaultOutputTokens);
    const held = this.reserve(own ?? this.sessionMaxOutput);
    if ('closeCode' in held) return refusal(held);
    // An upstream `error` gives a create's hold back only when it names the event_id the gateway forwarded it under
    // (named()): an error about another event (a malformed one sent right after, naming none or the same id as the
    // create) is never taken for the create's refusal while the upstream runs it.
    const verdict = this.named(held, m.event, pin);
    const conv = m.event.response?.conversation;
    if (conv !== undefined && conv !== 'auto') held.outOfBand = true;
    if (!(held.r instanceof Promise)) {
      this.queued.push(held);
      return verdict;
    }
    // The frame waits for the decision: a response the quota refuses is never forwarded.
    return held.r.then((r) => {
      if (this.ended) this.o.quota.release(r);
      else this.queued.push({ ...held, r });
      return verdict;
    }, (e) => refusal(this.failureOf(e)));
  }

  /** A refusal when `session` turns on transcription with a model outside the key's allow-list as it is now (an in-memory lookup). */
  private transcriptionAllowed(session: unknown): ReturnType<typeof transcriptionRefusal> | undefined {
    const allowed = this.liveKey()?.models;
    const refused = allowed?.length ? transcriptionNotAllowed(session, allowed) : undefined;
    return refused === undefined ? undefined : transcriptionRefusal(refused);
  }

  upstream(text: string): SessionFailure | undefined | Promise<SessionFailure | undefined> {
    // Frames the relay read before the end were observed before it (session.ts: observeLate, then onEnd). Nothing
    // read after it may bill: an unanswered create was billed at the end, and its late response.created would bill it twice.
    if (this.ended) return undefined;
    this.context.upstream(text);
    const delta = this.delivered.add(text, () => this.lastStarted);
    if (delta !== undefined) {
      if (this.settled.has(delta)) {
        // Output after its response.created of a response billed before it: that response's, billed already.
        if (this.lateCreated.has(delta)) this.delivered.take(delta);
        // Else output relayed after the response under this id was billed: another response under a reused id (an
        // upstream that never sends response.created), billed as one on its response.done or at the end. Dropped as
        // the billed one's, every response after the first of such an upstream ran free. A repeated response.done
        // with nothing relayed since stays a copy.
        else this.reopen(delta);
      } else {
        const held = this.running.get(delta);
        if (held) this.checkpointOutput(delta, held);
      }
      // Relayed, and billed at the end like the others open (session.ts relays a frame before its failure).
      return this.delivered.size > MAX_OPEN_OUTPUTS ? TOO_MANY_RESPONSES : undefined;
    }
    const m = meteredEvent(text);
    if (!m) return undefined;
    if (m.type === 'transcription_session.created' || m.type === 'transcription_session.updated') {
      // A transcription session's confirmed model: what its transcriptions bill at (nothing else here is metered).
      const tm = transcriptionModelOf(m.event.session);
      if (tm !== undefined) this.transcription = tm;
      return undefined;
    }
    if (m.type === 'session.created' || m.type === 'session.updated') {
      if (m.type === 'session.updated') this.pendingUpdates = Math.max(0, this.pendingUpdates - 1);
      const tm = transcriptionModelOf(m.event.session);
      if (tm !== undefined) this.transcription = tm;
      const auto = autoResponseOf(m.event.session);
      if (auto !== undefined) this.autoResponse = auto;
      this.context.session(m.event.session, Buffer.byteLength(text), true);
      this.delivered.audioRate = outputAudioRate(m.event.session, this.delivered.audioRate);
      const v = maxOutputOf(m.event.session, this.o.defaultOutputTokens);
      // The upstream's word is final only when no later client update (which may raise it) is in flight.
      if (v !== undefined) this.sessionMaxOutput = this.pendingUpdates ? Math.max(this.sessionMaxOutput, v) : v;
      return undefined;
    }
    const id = typeof m.event.response?.id === 'string' ? m.event.response.id : '';
    if (m.type === 'response.created') {
      if (this.running.has(id)) return undefined;
      if (this.doneFirst.has(id)) {
        if (this.settled.has(id)) this.lateCreated.add(id);
        return undefined;
      }
      // An id already billed, by its own response.done after its response.created: the upstream reuses ids (a
      // compatible server naming every response alike), so this is another response, billed as one. Ignored, it and
      // every later one under that id ran free, their deltas and response.done taken for the first one's.
      if (this.settled.has(id)) this.reopen(id);
      this.lastStarted = id;
      // A response the upstream started itself cannot be refused: if it cannot be covered, the session ends.
      // Its limit is the one the upstream announces for it, else the session's.
      const announced = this.announced(m.event.response);
      this.answered();
      const held = this.takeQueued(announced) ?? this.reserve(announced);
      if ('closeCode' in held) {
        // Refusing its hold does not stop the upstream, which was asked (its own turn detection) and reads the
        // conversation: the session ends, and the response is billed at the end like any cut one, unreserved
        // (a charge is capped by what is left to spend). Before, it was billed nothing.
        this.running.set(id, { r: null, at: Date.now(), limits: this.limits(announced) });
        return held;
      }
      if (held.r instanceof Promise) {
        // Decided later: a refusal ends the session then (the response is billed unreserved when it is done).
        // Granted while it still runs: checkpointed from then on (the shared store decides after the frame).
        held.r.then((r) => {
          if (this.ended && !held.billed) this.o.quota.release(r);
          else if (!held.billed && this.running.get(id) === held) {
            held.r = r;
            this.checkpoint(id, held, false);
          }
        }, (e) => this.fail(this.failureOf(e)));
      }
      this.running.set(id, held);
      this.checkpoint(id, held, false);
      // Started and never finished, each keeps its hold and its entry until the session's end: an upstream sending
      // response.created after response.created (no output, no response.done) held them without bound. The same cap as
      // for responses with output; the one past it is kept, and billed at the end with the others.
      return this.running.size > MAX_OPEN_OUTPUTS ? TOO_MANY_STARTED : undefined;
    }
    if (m.type === 'response.done') return this.settle(id, m.event.response);
    if (m.type === TRANSCRIPTION_DONE) return this.chargeTranscription(m.event);
    if (m.type === 'input_audio_buffer.committed') {
      // The commit holds at most the audio appended since the previous one; transcription runs on it if on now.
      if (this.transcription !== null && typeof m.event.item_id === 'string') this.transcribing.committed(this.transcriptionId(m.event), this.transcription, this.context.tailBytes);
      this.context.tailBytes = 0;
      // Only a turn the upstream's detection ended asks it for a response: a client's own commit does not (OpenAI: a
      // commit "will not create a response"), and billing one as unanswered charged for a response never asked for.
      if (this.autoResponse && this.turnEnded) this.autoPending = true;
      this.turnEnded = false;
      return this.transcribing.size > MAX_OPEN_OUTPUTS ? TOO_MANY_TRANSCRIPTIONS : undefined;
    }
    if (m.type === 'input_audio_buffer.speech_stopped' || m.type === 'input_audio_buffer.timeout_triggered') {
      this.turnEnded = true;
      return undefined;
    }
    if (m.type === 'input_audio_buffer.cleared') {
      this.context.tailBytes = 0;
      return undefined;
    }
    if (m.type === TRANSCRIPTION_DELTA) {
      this.transcribing.delta(this.transcriptionId(m.event), m.event.delta);
      return undefined;
    }
    // A failed transcription reports no usage and no transcript (no work done): an estimate would bill the user for a failure.
    if (m.type === TRANSCRIPTION_FAILED) {
      this.transcribing.take(this.transcriptionId(m.event));
      return undefined;
    }
    if (m.type === 'error') this.refused(m.event.error);
    return undefined;
  }

  /**
   * An upstream `error`: the create it refuses, if any, is not billed. One naming an event (OpenAI's `error.event_id`:
   * the id the gateway forwarded the create under, see named()) refuses that create: its hold is given back; if a
   * running response took its hold, that response answered the pending commit of the upstream's turn detection
   * instead (it started first), so the commit is answered and not billed again at the end.
   * One naming no event (an upstream that does not echo ids) refuses a create only if its code says so:
   * `conversation_already_has_active_response`, which only a response.create in the conversation can get. The
   * upstream answers events in order, so it refuses the oldest create in the conversation not answered yet: when a
   * response started on a create's hold while a commit was pending (turnOrCreate), that create, and the response was
   * the commit's (the commit is answered; the creates sent since keep their holds: the upstream runs the next one);
   * else the oldest create waiting; else, as above, the pending commit. Freeing the newest waiting create instead
   * gave back the hold of a create sent after the refused one, which the upstream then ran: billed at the close only
   * unreserved, on the commit's account. Any other unnamed error frees nothing: it may be about any event the client sent before or
   * after the create (a malformed one, a `response.cancel` with nothing running), and taking it for the create's
   * refusal let a create run unbilled.
   */
  private refused(error: any): void {
    const about = error?.event_id;
    if (typeof about === 'string' && about) {
      const at = this.queued.findIndex((h) => h.eventId === about);
      if (at !== -1) this.releaseHeld(this.queued.splice(at, 1)[0]!);
      else if (this.autoPending && [...this.running.values()].some((h) => h.eventId === about)) this.autoPending = this.turnOrCreate = false;
      return;
    }
    if (error?.code !== ACTIVE_RESPONSE) return;
    // The upstream answers events in order: the refusal is about the oldest create in the conversation it has not
    // answered. A response that started on a create's hold while a commit was pending may have been the commit's:
    // then that create is the one refused, and the commit is answered (the creates sent after it still wait, held).
    if (this.turnOrCreate && this.autoPending) {
      this.turnOrCreate = false;
      this.autoPending = false;
      return;
    }
    const at = this.queued.findIndex((h) => !h.outOfBand);
    if (at !== -1) this.releaseHeld(this.queued.splice(at, 1)[0]!);
    else if (this.autoPending && [...this.running.values()].some((h) => h.eventId !== undefined)) this.autoPending = false;
  }

  /**
   * The session ended. A response that started (response.created, or output delivered) and never got its
   * response.done is billed once on the estimate of what it delivered, flagged `estimated`, with `cause` as
   * its error code. So is a response the upstream was asked for and never answered (a `response.create`
   * forwarded to it, or a commit its turn detection answers itself): it read the conversation, and a provider
   * bills that input; nothing was delivered. `forwarded` false: no client frame reached an upstream (it never
   * opened), so the creates' holds are given back.
   */
  end(cause: string, forwarded = true): void {
    if (this.ended) return;
    this.ended = true;
    // A response still unfinished may have completed upstream unseen, its output then read by the responses
    // that started after it (`running` is in start order); one seen only by its deltas has no known start.
    let unordered = 0;
    for (const id of this.delivered.ids()) if (!this.settled.has(id) && !this.running.has(id)) unordered += this.sessionMaxOutput;
    let earlier = 0;
    for (const [id, held] of [...this.running]) {
      this.settleUnfinished(id, held, cause, earlier + unordered);
      earlier += held.limits.maxOutput;
    }
    for (const id of this.delivered.ids()) if (!this.settled.has(id)) this.settleUnfinished(id, null, cause, earlier + unordered - this.sessionMaxOutput);
    // Unanswered requests come after every response seen (which may have finished upstream unseen), in order. The
    // upstream runs one response at a time in the conversation and refuses a create meanwhile: of the requests
    // waiting in it, one at most ran (a client sending two creates and closing is not billed twice); each one
    // outside it (`conversation: "none"`) may have run.
    let before = earlier + unordered;
    let inConversation = false;
    for (const h of this.queued) {
      if (!forwarded || (!h.outOfBand && inConversation)) {
        this.releaseHeld(h);
        continue;
      }
      this.settleUnfinished(`unanswered_${++this.seq}`, h, cause, before);
      before += h.limits.maxOutput;
      if (!h.outOfBand) inConversation = true;
    }
    // Unreserved, like the response it would have been (one the upstream starts itself reserves when it is created).
    if (this.autoPending && !inConversation) this.settleUnfinished(`unanswered_${++this.seq}`, null, cause, before);
    this.autoPending = false;
    this.settleTranscriptions(cause);
    this.queued = [];
    this.running.clear();
    for (const id of [...this.checkpoints.keys()]) this.forgetCheckpoint(id);
  }

  private settleUnfinished(id: string, held: Held<R> | null, cause: string, others: number): void {
    this.running.delete(id);
    const window = held?.limits.maxInput ?? this.contextTokens();
    const input = inputEstimate(this.context.bound(others), window, this.price());
    const p = this.charge(id, held, null, { delivered: { ...this.delivered.take(id), ...input }, errorCode: cause });
    // Nobody is left to tell: a failed commit is logged by committed().
    if (p instanceof Promise) p.catch(() => {});
  }

  /**
   * A response was seen that no running one accounts for: it answers the oldest request, a client's queued
   * create (whose hold it takes) or else the pending commit of the upstream's turn detection.
   */
  private answered(): void {
    if (this.queued.length) return;
    this.autoPending = false;
    this.turnOrCreate = false;
  }

  /**
   * Forwards a create under an event_id of the gateway's (random, so no other event can carry it), the one an upstream
   * `error` refusing it names; the client's own (or none) is remembered, and such an error is relayed naming it
   * (clientEventId). The create is re-serialised with the id first, in place of the client's. Matching the client's ids let a create share its id with a malformed event sent
   * next to it, whose error then freed the create while the upstream ran it.
   */
  private named(held: Held<R>, event: any, pin: FrameRewrite | undefined): FrameRewrite {
    const id = `evt_gw_${randomToken(16)}`;
    held.eventId = id;
    this.clientIds.set(id, keptId(event.event_id));
    // The ids of the latest creates are enough: an error refusing a create comes right after it.
    if (this.clientIds.size > CLIENT_IDS_KEPT) this.clientIds.delete(this.clientIds.keys().next().value!);
    // Written as parsed (so a key given twice reaches the upstream once, as the gateway read it), its id first.
    const { event_id: _, ...rest } = pin ? JSON.parse(pin.forward) : event;
    return { forward: JSON.stringify({ event_id: id, ...rest }) };
  }

  clientEventId(id: string): { id: unknown } | undefined {
    return this.clientIds.has(id) ? { id: this.clientIds.get(id) } : undefined;
  }

  /**
   * The max output of the responses started before running response `id`: output that may be in its input unseen,
   * as end() bounds it. One started after it answers later and is never its input. (end() also counts the responses
   * seen only by their output; left out here, a checkpoint stays at or below the cut, without a pass over every
   * id an upstream named per checkpoint.)
   */
  private maxOutputBefore(id: string): number {
    let n = 0;
    for (const [other, h] of this.running) {
      if (other === id) break;
      n += h.limits.maxOutput;
    }
    return n;
  }

  /** The max output of every response still running: output that may have joined the conversation unseen. */
  private runningMaxOutput(): number {
    let n = 0;
    for (const h of this.running.values()) n += h.limits.maxOutput;
    return n;
  }

  /** The max output tokens a response announces for itself, else the session's. */
  private announced(response: unknown): number {
    return maxOutputOf(response, this.o.defaultOutputTokens) ?? this.sessionMaxOutput;
  }

  /**
   * The oldest queued hold, for the response that just started, if it covers the `maxOutput` tokens the
   * response is allowed; one that does not (a client's capped response.create, while the upstream started its
   * own or applies a larger limit) is given back, never used (that would bill this response at its cap) and
   * never left behind (it would stay reserved until the session ends): the caller reserves by `maxOutput`.
   */
  private takeQueued(maxOutput: number): Held<R> | undefined {
    const oldest = this.queued.shift();
    if (oldest && !oldest.outOfBand && this.autoPending) this.turnOrCreate = true;
    if (!oldest || oldest.limits.maxOutput >= maxOutput) return oldest;
    this.releaseHeld(oldest);
    return undefined;
  }

  /** Resolves once every settlement handed to the quota has committed or failed (the session's cost is final). */
  async idle(): Promise<void> {
    while (this.inFlight.size) await Promise.allSettled([...this.inFlight]);
  }

  private releaseHeld(h: Held<R>): void {
    if (h.r instanceof Promise) h.r.then((r) => this.o.quota.release(r), () => {});
    else if (h.r !== null) this.o.quota.release(h.r);
  }

  /** A refused reservation as the session sees it: money is a policy close; anything else is our failure. */
  private failureOf(e: unknown): SessionFailure {
    if (e instanceof GatewayError && e.status === 402) return moneyFailure(e);
    (this.o.log ?? stdLogger).error('realtime.reserve_failed', { session: this.o.sessionId }, e);
    return INTERNAL_FAILURE;
  }

  /**
   * Why the key may no longer run this session (currentKey), or the transcription model the upstream confirmed, now
   * outside the key's model allow-list; undefined while it may.
   */
  keyRefusal(): SessionFailure | undefined {
    const key = this.currentKey();
    if ('closeCode' in key) return key;
    const allowed = key.models;
    if (this.transcription === null || !allowed?.length || allowed.includes(this.transcription)) return undefined;
    return policyFailure('model_not_allowed', `This API key may no longer use model ${storedText(this.transcription, 100)} for input transcription`, 'permission_error');
  }

  /** The key's record as the index holds it now (by id when the index can: no hash per client event). */
  private liveKey(): K | undefined {
    return this.o.keys.byId?.(this.o.key.id) ?? this.o.keys.lookup(this.o.plainKey);
  }

  /**
   * The key record last authorized. The index replaces a key's record on every write of it (and drops it when its
   * owner is disabled), so the same record needs only its expiry checked again: authorizing on every client event
   * matched the address against up to 256 allow_ips ranges (about 30 us) for each audio append or empty frame.
   */
  private authorized: K | undefined;

  private currentKey(): K | SessionFailure {
    const key = this.liveKey();
    if (!key || key.status !== 1) return policyFailure('api_key_revoked', 'The API key was disabled or deleted', 'authentication_error');
    if (key.expiresAt !== null && key.expiresAt > 0 && key.expiresAt <= nowSeconds()) {
      return policyFailure('api_key_expired', 'The API key expired', 'authentication_error');
    }
    if (key === this.authorized) return key;
    try {
      this.o.policy?.authorize(key, this.o.model, this.o.ip);
    } catch (e) {
      if (!(e instanceof GatewayError) || (e.status !== 401 && e.status !== 403)) throw e;
      return policyFailure(e.code, e.message, e.status === 401 ? 'authentication_error' : 'permission_error');
    }
    this.authorized = key;
    return key;
  }

  private price(): RealtimePrice {
    return this.billing().price;
  }

  /** The model whose price applies now and that price: the channel's billed model while it has a price, else the requested one. */
  private billing(): { model: string; price: RealtimePrice } {
    const billed = this.target?.billedModel;
    const up = billed && billed !== this.o.model ? this.o.prices.get(billed) : undefined;
    if (up) return { model: billed!, price: up };
    return { model: this.o.model, price: this.o.prices.get(this.o.model) ?? this.o.price };
  }

  /** The context window of `price` (the session's billing price by default), else BILLING_DEFAULT_CONTEXT_TOKENS. */
  private contextTokens(price: RealtimePrice = this.price()): number {
    const c = price.contextWindow;
    return typeof c === 'number' && Number.isSafeInteger(c) && c > 0 ? c : this.o.defaultContextTokens;
  }

  private limits(maxOutput: number): Limits {
    const ctx = this.contextTokens();
    return { maxInput: ctx, maxOutput, input: ctx };
  }

  private reserve(maxOutput: number): Held<R> | SessionFailure {
    const key = this.currentKey();
    if ('closeCode' in key) return key;
    const limits = this.limits(maxOutput);
    const amount = Math.max(this.o.minReserve, reservationFor(limits.maxInput, maxOutput, this.price(), this.o.ratio));
    try {
      const r = this.o.quota.reserve({ userId: key.userId, apiKey: key, amount, ref: `${this.o.sessionId}#${++this.seq}`, limits });
      return { r, at: Date.now(), limits };
    } catch (e) {
      if (e instanceof GatewayError && e.status === 402) return moneyFailure(e);
      throw e;
    }
  }

  private settle(doneId: string, response: any): SessionFailure | undefined | Promise<SessionFailure | undefined> {
    // A response.done without an id is the oldest running response's: billed once here, not again at the end.
    const responseId = doneId || (this.running.keys().next().value ?? '');
    if (responseId && this.settled.has(responseId)) return undefined;
    // A response.done with no response.created seen first is billed all the same (on a queued hold that covers it, else unreserved).
    if (!this.running.has(responseId)) {
      this.answered();
      if (responseId) this.doneFirst.add(responseId);
    }
    const held = this.running.get(responseId) ?? this.takeQueued(this.announced(response)) ?? null;
    this.running.delete(responseId);
    const t = tokensOf(response?.usage);
    const failed = response?.status === 'failed';
    const errorCode = failed ? storedText((this.target?.scrub ?? String)(String(response?.status_details?.error?.code ?? response?.status_details?.reason ?? 'failed'))) : '';
    // Charged before its output joins the conversation: an unsplit input total is split on what the conversation held.
    const verdict = this.charge(responseId, held, response, { delivered: this.delivered.take(responseId), errorCode, status: failed ? 502 : 200 });
    this.context.output(t.textOut, t.audioOut, held?.limits.maxOutput ?? this.announced(response));
    return verdict;
  }

  /** Bills one response: as its response.done reports (`response`), or on what it delivered when it has none. */
  private charge(responseId: string, held: Held<R> | null, response: any, o: ChargeBasis): SessionFailure | undefined | Promise<SessionFailure | undefined> {
    if (responseId) this.settled.add(responseId);
    this.forgetCheckpoint(responseId);
    if (held) held.billed = true;
    const log = this.usageLog(responseId, held, response, o);
    const r = held?.r ?? null;
    if (r instanceof Promise) {
      // The hold is still being decided: settle once it is; if it was refused, unreserved (only responses the
      // upstream started itself wait here: a refused create is never forwarded, and the upstream ran this one all
      // the same), capped by what is left to spend, like one refused at once.
      return this.committed((r as Promise<R>).then((h) => this.o.quota.settleNow(h, log), () => this.o.quota.settleNow(null, log)));
    }
    const res = this.o.quota.settleNow(r as R | null, log);
    if (res instanceof Promise) return this.committed(res);
    this.count(res.cost);
    return this.spent();
  }

  /** The usage row of one response: as its response.done reports (`response`), or on `o.delivered` when it has none. */
  private usageLog(responseId: string, held: Held<R> | null, response: any, o: ChargeBasis): RealtimeUsageLog {
    const t = tokensOf(response?.usage);
    const target = this.target;
    const bill = this.billing();
    const limits = held?.limits ?? this.limits(this.sessionMaxOutput);
    const reported = !!response?.usage && typeof response.usage === 'object';
    // An audio count is a part of the input total: the total bounds it when it is usable.
    const inputBound = ok(t.inputTotal) ? Math.min(t.inputTotal, limits.input) : limits.input;
    // What the conversation can have held (context.ts), the input of a response whose report gives no input count.
    const guess = () => inputEstimate(this.context.bound(this.runningMaxOutput()), limits.maxInput, bill.price);
    const billed = reported ? responseUsage(t, o.delivered, inputBound, this.context.bound(0), bill.price, guess) : null;
    const log: RealtimeUsageLog = {
      requestId: `${this.o.sessionId}_${responseId ? this.billingId(responseId) : `n${++this.seq}`}`,
      kind: 'realtime',
      userId: this.o.key.userId,
      apiKeyId: this.o.key.id,
      channelId: target?.channelId ?? null,
      model: this.o.model,
      upstreamModel: target?.upstreamModel ?? '',
      billedModel: bill.model,
      stream: true,
      // No usage object at all: billing falls back to what was reserved (flagged `estimated`), never to 0;
      // a response cut before its response.done falls back to what it delivered.
      usage: billed?.usage ?? null,
      // Output: what was delivered, for a count the report leaves out (never max output, never 0); an unusable one:
      // the rest of a usable output total, at least what was delivered (billed-usage.ts).
      // Input: a cut response's bound on what the conversation held (context.ts); else billing takes the hold's input bound.
      // An audio input count a report makes unusable (-5, 1.5, "7", 1e308): billed like an unusable text input
      // count, at a bound: the reported input total it is a part of when that is usable, else the hold's input
      // bound (the context window), then clamped with the rest of the input, dearest first; flagged `invalid`,
      // never as 0: the upstream bills that audio. An unusable cached count: the tokens its breakdown took out
      // of the text and audio counts (none taken out: they bill as text or audio already). Only beside a
      // report: with none, the estimate stands for the whole usage.
      // No usage at all: a cut response's input is its own estimate; a response.done's, the conversation's (not the
      // hold's input bound, the whole window at the text price).
      estimate: billed?.estimate ?? (o.delivered.input !== undefined ? o.delivered : { ...o.delivered, ...guess() }),
      estimated: billed?.estimated,
      // The reservation's own bounds (the same as it carries), so a response whose hold was refused is bounded alike.
      limits,
      price: bill.price,
      latencyMs: held ? Date.now() - held.at : 0,
      ttftMs: null,
      status: o.status ?? 200,
      // Upstream text stored on a row the user can read: scrubbed and short.
      errorCode: o.errorCode,
      attempts: 1,
      ip: this.o.ip,
      group: this.o.group,
      ratio: this.o.ratio,
      ...this.keyLimit(),
    };
    return log;
  }

  /**
   * Output was relayed for a running response: it is checkpointed at its first output, then at most every
   * CHECKPOINT_MS while output flows, so a crash bills what reached the client up to then.
   */
  private checkpointOutput(id: string, held: Held<R>): void {
    const last = this.checkpoints.get(id);
    if (!last || !last.output || Date.now() - last.at >= CHECKPOINT_MS) return this.checkpoint(id, held, true);
    // Output relayed since the last one: the next checkpoint is due CHECKPOINT_MS after it, output or not by then.
    last.next ??= setTimeout(() => {
      last.next = undefined;
      if (!this.ended && this.running.get(id) === held) this.checkpoint(id, held, true);
    }, last.at + CHECKPOINT_MS - Date.now());
  }

  private forgetCheckpoint(id: string): void {
    const c = this.checkpoints.get(id);
    if (c?.next) clearTimeout(c.next);
    this.checkpoints.delete(id);
  }

  /**
   * Keeps what a running response would be billed if the process died now (QuotaPort.checkpoint): the estimate of
   * a response cut at this point (its output so far, the conversation's bound as input), with CRASH_CAUSE as its
   * error code, under the request id its settlement will have, which replaces it. Only with a hold already
   * decided (the checkpoint is capped by it; one still pending in the shared store checkpoints once granted) and a
   * response id.
   */
  private checkpoint(id: string, held: Held<R>, output: boolean): void {
    const save = this.o.quota.checkpoint;
    const r = held.r;
    if (!save || !id || r === null || r instanceof Promise) return;
    if (!this.checkpoints.has(id) && this.checkpoints.size >= MAX_CHECKPOINTED) return;
    this.forgetCheckpoint(id);
    this.checkpoints.set(id, { at: Date.now(), output });
    try {
      // Bounded as a cut now would be (end()), never above it: counting the responses started after it billed their
      // max output as this one's input, at the audio input price, more than the same response cut at the session's end.
      const input = inputEstimate(this.context.bound(this.maxOutputBefore(id)), held.limits.maxInput, this.price());
      save.call(this.o.quota, r, this.usageLog(id, held, null, { delivered: { ...this.delivered.peek(id), ...input }, errorCode: CRASH_CAUSE }));
    } catch (e) {
      // The relay goes on: the response is billed at its end as always; only a crash before then would miss it.
      (this.o.log ?? stdLogger).error('realtime.checkpoint_failed', { session: this.o.sessionId, response: storedId(id) }, e);
    }
  }

  /** A response under an id already billed: another one (the upstream reuses ids), billed under a request id of its own. */
  private reopen(id: string): void {
    this.settled.delete(id);
    this.reused.set(id, (this.reused.get(id) ?? 1) + 1);
  }

  /** A response's part of its usage row's request id: its own id, and which of the responses started under it when the upstream reuses ids. */
  private billingId(responseId: string): string {
    const n = this.reused.get(responseId);
    return n === undefined ? storedId(responseId) : `${storedId(responseId)}~${n}`;
  }

  /** The model and price a transcription by `model` bills at: its own, else the session's (never free). */
  private transcriptionBilling(model: string | null): { model: string; price: RealtimePrice } {
    const own = model ? this.o.prices.get(model) : undefined;
    return own ? { model: model!, price: own } : this.billing();
  }

  private transcriptionPrice(): RealtimePrice {
    return this.transcriptionBilling(this.transcription).price;
  }

  /** The billing id of an item's transcription (`tr_<item>_<content index>`); a nameless item gets a fresh one. */
  private transcriptionId(ev: any): string {
    const item = typeof ev?.item_id === 'string' && ev.item_id ? storedId(ev.item_id) : `n${++this.seq}`;
    return `tr_${item}_${Number.isSafeInteger(ev?.content_index) ? ev.content_index : 0}`;
  }

  /**
   * A completed input transcription, billed once when it is reported (unreserved: it is work done, like a
   * response the upstream started), at the transcription model's price; a model without one bills at the
   * session's, never free. Bounded like a response: input by the context window, output by the default
   * max output; a missing text input count is 0 (the input is the audio).
   */
  private chargeTranscription(ev: any): SessionFailure | undefined | Promise<SessionFailure | undefined> {
    const id = this.transcriptionId(ev);
    const pending = this.transcribing.take(id);
    const price = this.transcriptionPrice();
    const { usage, estimated, inputTotal, cachedMoved } = transcriptionUsage(ev, price);
    // An unusable audio count (as for a response): the reported input total, else the audio the committed item
    // held, else the context window; an unusable cached count: what its breakdown took out of the others.
    const total = inputTotal !== undefined && ok(inputTotal) ? inputTotal : undefined;
    const audioBound = total ?? (pending ? audioTokensOf(this.context.seconds(pending.audioBytes)) : this.contextTokens(price));
    // An unusable text count: the rest of the input total (else of the context window, as for a response) once the
    // usable audio and cached counts are out; before, 0 (the transcription's bound has no input), while the upstream billed it.
    const part = (v: unknown) => (typeof v === 'number' && ok(v) ? v : 0);
    const textBound = Math.max(0, (total ?? this.contextTokens(price)) - part(usage.audioInput) - part(usage.cacheRead));
    return this.billTranscription(id, this.transcription, usage, estimated, estimateTextTokens(typeof ev.transcript === 'string' ? ev.transcript : ''), '',
      { input: textBound, audioInput: audioBound, cacheRead: cachedMoved ?? 0 });
  }

  /**
   * Transcriptions the session's end leaves unreported (a committed item, and the audio appended after the last
   * commit, which the upstream's turn detection may have committed unseen): the upstream may have run them, so
   * each is billed on its audio (at most what was appended) and the transcript deltas seen, flagged `estimated`.
   */
  private settleTranscriptions(cause: string): void {
    const left: PendingTranscription[] = this.transcribing.takeAll();
    if (this.transcription !== null && this.context.tailBytes > 0) {
      left.push({ id: 'tr_uncommitted', model: this.transcription, audioBytes: this.context.tailBytes, textTokens: 0 });
    }
    for (const p of left) {
      const audio = audioTokensOf(this.context.seconds(p.audioBytes));
      const usage = { input: 0, output: p.textTokens, cacheRead: 0, cacheWrite: 0, audioInput: audio, audioOutput: 0 };
      const r = this.billTranscription(p.id, p.model, usage, true, p.textTokens, cause);
      if (r instanceof Promise) r.catch(() => {});
    }
  }

  private billTranscription(id: string, model: string | null, usage: RealtimeUsageLog['usage'], estimated: boolean, estimatedOutput: number, errorCode: string,
    inputFallback: { input: number; audioInput: number; cacheRead: number } | null = null): SessionFailure | undefined | Promise<SessionFailure | undefined> {
    if (this.settled.has(id)) return undefined;
    this.settled.add(id);
    const bill = this.transcriptionBilling(model);
    const ctx = this.contextTokens(bill.price);
    const log: RealtimeUsageLog = {
      requestId: `${this.o.sessionId}_${id}`, kind: 'realtime', userId: this.o.key.userId, apiKeyId: this.o.key.id,
      channelId: this.target?.channelId ?? null, model: this.o.model, upstreamModel: model !== null ? storedText(model, 128) : this.target?.upstreamModel ?? '',
      billedModel: bill.model, stream: true, usage, estimated,
      estimate: { output: estimatedOutput, ...inputFallback },
      limits: { maxInput: ctx, maxOutput: this.o.defaultOutputTokens, input: 0 },
      price: bill.price, latencyMs: 0, ttftMs: null, status: 200, errorCode, attempts: 1, ip: this.o.ip, group: this.o.group, ratio: this.o.ratio,
      ...this.keyLimit(),
    };
    const res = this.o.quota.settleNow(null, log);
    if (res instanceof Promise) return this.committed(res, false);
    this.cost += res.cost;
    return this.spent();
  }

  /**
   * A settlement committing: the verdict on its `response.done` once it has (counted, then the balance
   * checked); a failed commit ends the session. Tracked until then, for `idle()`.
   */
  private committed(p: Promise<{ cost: number } | null>, response = true): Promise<SessionFailure | undefined> {
    const verdict = p.then((res) => {
      if (res && response) this.count(res.cost);
      else if (res) this.cost += res.cost;
      return this.spent();
    }, (e): SessionFailure => {
      // The quota logged the row; serving more responses unbilled is what must not happen.
      (this.o.log ?? stdLogger).error('realtime.settlement_failed', { session: this.o.sessionId }, e);
      return INTERNAL_FAILURE;
    });
    const tracked = verdict.then(() => { this.inFlight.delete(tracked); });
    this.inFlight.add(tracked);
    return verdict;
  }

  private count(cost: number): void {
    this.responses++;
    this.cost += cost;
  }

  /** The key as it is now: a charge without a hold on a limited key is capped by its remain_quota too. */
  private keyLimit(): { keyLimited: boolean; keyRemain: number } {
    const k = this.liveKey() ?? this.o.key;
    return { keyLimited: !k.unlimitedQuota, keyRemain: k.remainQuota };
  }

  /** Spent: nothing more can be reserved, so the session ends rather than idle on an empty balance. */
  private spent(): SessionFailure | undefined | Promise<SessionFailure | undefined> {
    // Across nodes every count is every node's (the shared store's), read once per settlement (never per frame).
    const funds = this.o.quota.userAvailable?.(this.o.key.userId) ?? this.o.quota.available(this.o.key.userId);
    // A budget used up refuses every response, but a transcription (or a response the upstream starts itself) has no
    // hold to refuse: the session ends instead of spending past it for as long as it runs.
    const budget = this.o.quota.budgetLeft?.(this.o.key.userId, this.o.key.id) ?? Infinity;
    // A limited key spent is as final: its responses are refused, but a transcription is capped at what the key has
    // left, so past it the upstream transcribed every later one for nothing.
    const key = this.liveKey() ?? this.o.key;
    const left = key.unlimitedQuota ? undefined : this.o.quota.keyAvailable?.(key, this.o.key.userId);
    const verdict = (f: number, b: number, n: number | undefined) =>
      (f <= 0 ? BALANCE_SPENT : b <= 0 ? BUDGET_SPENT : n !== undefined && n <= 0 ? KEY_SPENT : undefined);
    if (!(funds instanceof Promise) && !(budget instanceof Promise) && !(left instanceof Promise)) return verdict(funds, budget, left);
    // An unreadable count ends nothing here: the next response's admission asks the shared store again.
    const read = <T>(v: T | Promise<T>, unread: T) => Promise.resolve(v).catch(() => unread);
    return Promise.all([read(funds, Infinity), read(budget, Infinity), read(left, undefined)]).then(([f, b, n]) => verdict(f, b, n));
  }
}

const BALANCE_SPENT = policyFailure('quota_exhausted', 'Quota exhausted: the balance is spent');
const KEY_SPENT = policyFailure('key_quota_exhausted', 'API key quota exhausted: the key has nothing left to spend');
const BUDGET_SPENT = policyFailure('budget_exceeded', 'A budget of this key or its owner is used up');

/** A client event too deep to read is not forwarded unread (it may be one the meter must see). */
const TOO_DEEP: ClientVerdict = {
  refuse: true, type: 'invalid_request_error', code: 'json_too_deep',
  message: `Event nested deeper than ${CLIENT_EVENT_MAX_DEPTH} levels; it was not forwarded`,
};

/** A client frame that may be a metered event but is not JSON as the gateway reads it (NaN, Infinity, a syntax error). */
const INVALID_JSON: ClientVerdict = {
  refuse: true, type: 'invalid_request_error', code: 'invalid_json',
  message: 'Event is not valid JSON (NaN and Infinity are not JSON numbers); it was not forwarded',
};

/** A client event a lenient upstream could read otherwise (ambiguous.ts): refused, the session kept. */
const ambiguous = (key: string): ClientVerdict => ({ refuse: true, type: 'invalid_request_error', code: 'ambiguous_event', message: AMBIGUOUS_MESSAGE(key) });

/**
 * Money, not the key: the response is refused and the session kept (a cheaper response may still fit). Reservations
 * fail only with the key's failures (authentication or permission errors) or money's (billing errors).
 */
function refusal(f: SessionFailure): ClientVerdict {
  if (f.type === 'billing_error') return { refuse: true, type: f.type, code: f.code, message: f.message };
  return f;
}
