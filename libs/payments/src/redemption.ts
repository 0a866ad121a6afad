/**
 * Redemption codes: admins mint batches of single-use codes worth a quota credit; a user redeems one.
 * Codes are stored as SHA-256 only and shown in clear once, in the create answer. Redeeming is one
 * unit of work (LedgerStore.redeemCodeOnce) that moves the code out of 'unused' (guarded by status and expiry) and writes
 * the ledger credit (kind 'redeem', ref = code id, unique per kind): parallel attempts credit once.
 * A code is a credit its minter grants, so it follows the ledger adjustment's role rule: an admin's code credits
 * only users of a lower role (root's codes anyone), else an admin could credit itself or a peer through a code.
 */
import { GatewayError, errorText, localWindows, stdLogger, nowSeconds, type AttemptWindow, type AttemptWindows, randomToken, sha256Hex, type ChangeBus } from '@gw/core';
import { KeyedTurns, type SharedKeyLock } from './turns';
import { ROLE, type LedgerStore, type RedemptionCodeRow, type RedemptionCodesStore, type RedemptionStatus, type UsersStore } from '@gw/db';

/** `gwr_` + 24 base62 characters (~143 random bits): guessing is hopeless, the attempt limit is a second wall. */
const CODE_PREFIX = 'gwr_';
const CODE_RANDOM_CHARS = 24;
/** Characters kept in clear in lists: the marker and 4 random ones, too few to help guessing. */
export const CODE_SHOWN_CHARS = CODE_PREFIX.length + 4;
export const MAX_CODES_PER_BATCH = 1000;
export const MAX_CODE_QUOTA = 1e15;
/** Longest lifetime of a code (10 years). */
export const MAX_CODE_TTL_SECONDS = 10 * 365 * 86_400;

export interface CreateBatchInput {
  batch: string;
  count: number;
  quota: number;
  /** Unix seconds; must be in the future. */
  expiresAt: number;
}

/** A user's redemptions waiting for their turn on one node; more are refused like a full window (429). */
const MAX_WAITING_PER_USER = 64;

export interface RedeemLimits {
  maxFailures: number;
  windowSeconds: number;
}

export function redemptionStatus(row: RedemptionCodeRow, at: number): RedemptionStatus {
  if (row.status === 'unused' && row.expiresAt <= at) return 'expired';
  return row.status as RedemptionStatus;
}

export class RedemptionService {
  private readonly failures: AttemptWindow;
  /**
   * A user's attempts run one at a time on each node. Each claims its place in the window before its code is looked
   * at, so parallel attempts in flight filled the window before any success had cleared it: a user redeeming more
   * valid codes at once than REDEEM_MAX_FAILURES got 429 for some. In turn, a success clears the count before the
   * next attempt claims, and parallel guesses still get at most the limit evaluated. With `sharedTurns` (PostgreSQL
   * + Redis) the turn is every node's: on N nodes up to N attempts of a user used to run at once, so a limit below
   * N refused a valid code sent in parallel.
   */
  private readonly turns: KeyedTurns;

  constructor(
    private readonly codes: RedemptionCodesStore,
    private readonly ledger: LedgerStore,
    private readonly bus: ChangeBus,
    private readonly limits: RedeemLimits,
    private readonly users: Pick<UsersStore, 'byId'>,
    clock: () => number = Date.now,
    windows: AttemptWindows = localWindows,
    sharedTurns: SharedKeyLock | null = null,
  ) {
    this.failures = windows('redeem', limits.windowSeconds * 1000, clock);
    this.turns = new KeyedTurns(MAX_WAITING_PER_USER, sharedTurns,
      (err) => stdLogger.warn('redeem.shared_turn_unavailable', { cause: errorText(err), msg: 'attempts of a user are serialised on this node only until Redis answers' }));
  }

  /** Mints a batch and returns its codes in clear: the only time they exist outside the caller's hands. */
  async create(actorId: number, input: CreateBatchInput): Promise<{ batch: string; quota: number; expiresAt: number; codes: string[] }> {
    const batch = input.batch.trim();
    if (!batch) throw new GatewayError(400, 'missing_field', 'batch: a name is required', { param: 'batch' });
    const at = nowSeconds();
    if (input.expiresAt <= at) throw new GatewayError(400, 'invalid_expiry', 'expires_at must be in the future', { param: 'expires_at' });
    if (input.expiresAt > at + MAX_CODE_TTL_SECONDS) throw new GatewayError(400, 'invalid_expiry', 'expires_at must be within 10 years', { param: 'expires_at' });
    const codes = Array.from({ length: input.count }, () => CODE_PREFIX + randomToken(CODE_RANDOM_CHARS));
    const inserted = await this.codes.insertBatch(codes.map((c) => ({
      codeHash: sha256Hex(c), prefix: c.slice(0, CODE_SHOWN_CHARS), batch, quota: input.quota,
      expiresAt: input.expiresAt, createdBy: actorId, createdAt: at,
    })));
    // Batch names identify what `revoke` acts on, so one name is one creation.
    if (!inserted) throw new GatewayError(409, 'batch_exists', `A batch named "${batch}" already exists; choose another name`, { param: 'batch' });
    return { batch, quota: input.quota, expiresAt: input.expiresAt, codes };
  }

  /**
   * Credits the code's quota to the user, once. Unknown, used, expired and revoked codes get the same
   * answer (no oracle for a guesser, nor for someone holding a leaked code). Each attempt is claimed in
   * the window before the code is looked at, so a burst of parallel guesses gets at most `maxFailures`
   * evaluated (counting failures afterwards let 200 parallel guesses through on a shared window); once
   * the window is full every attempt is refused with 429. A redeemed code clears the count, as a right
   * password does: each clearing costs a valid, unused code.
   */
  async redeem(userId: number, code: string): Promise<{ quota: number; balance: number; codeId: number }> {
    const done = await this.turns.run(`u${userId}`, () => this.redeemInTurn(userId, code));
    if (!done) throw tooManyAttempts(1);
    return done.value;
  }

  private async redeemInTurn(userId: number, code: string): Promise<{ quota: number; balance: number; codeId: number }> {
    const key = `u${userId}`;
    const wait = await this.failures.hit(key, this.limits.maxFailures);
    if (wait) throw tooManyAttempts(wait);
    const hash = sha256Hex(code.trim());
    await this.checkRole(userId, hash);
    const result = await this.ledger.redeemCodeOnce(hash, userId, nowSeconds(), (row) => `code ${row.prefix}… batch ${row.batch}`);
    if (!result) throw new GatewayError(400, 'invalid_code', 'This code is not valid: unknown, already redeemed, expired or revoked', { param: 'code' });
    // The credit has committed: clearing the count is best-effort. Thrown from here, a failure (the attempt store
    // unreachable) answered a done credit as a retryable 503, whose retry then met the spent code (400).
    await this.failures.reset(key).catch((err) => stdLogger.warn('redeem.count_not_cleared', { userId, cause: errorText(err), msg: 'the code was redeemed; its failed attempts still count' }));
    // After commit: the balance caches refresh only once the credit is durable.
    await this.bus.committed('user.changed', { userId });
    return result;
  }

  /**
   * Admins and root may redeem only root's codes: only root may adjust an admin's or its own balance. Regular
   * users are not checked: codes are minted for them, whoever minted them. An unknown code passes here and fails
   * as invalid below, and so does a spent, revoked or expired one: a 403 for those confirmed that a leaked code was
   * real, which invalid_code exists to hide.
   */
  private async checkRole(userId: number, hash: string): Promise<void> {
    const redeemer = await this.users.byId(userId);
    if (!redeemer || redeemer.role < ROLE.admin) return;
    const row = await this.codes.byHash(hash);
    if (!row || redemptionStatus(row, nowSeconds()) !== 'unused') return;
    const minter = row.createdBy === userId ? redeemer : await this.users.byId(row.createdBy);
    if (minter?.role === ROLE.root) return;
    throw new GatewayError(403, 'insufficient_role', 'Admins can only redeem codes minted by root (a code credits users of a lower role than its minter)');
  }

  /**
   * Revokes the still-unused codes of a batch; returns how many. 404 for a batch that does not exist.
   * A batch is its minter's grant, so it follows the user API's role rule: an admin below root revokes its own
   * batches (and those of users below it), never root's (the only codes an admin may redeem) or another admin's.
   * Batches are listed to admins with their minter, so the 403 tells nothing the list does not.
   */
  async revoke(actor: { id: number; role: number }, batch: string): Promise<number> {
    // One creation call per name (insertBatch refuses a taken one): any code of the batch names its minter.
    const [code] = (await this.codes.list({ batch, at: nowSeconds(), offset: 0, limit: 1 })).items;
    if (!code) throw new GatewayError(404, 'batch_not_found', `No batch named "${batch}"`, { param: 'batch' });
    if (actor.role < ROLE.root && code.createdBy !== actor.id) {
      const minter = await this.users.byId(code.createdBy);
      // A minter since deleted had some role nobody can check now: root decides.
      if (!minter || minter.role >= actor.role) {
        throw new GatewayError(403, 'role_too_high', 'You can revoke only batches minted by you or by users of a lower role', { param: 'batch' });
      }
    }
    return this.codes.revokeBatch(batch);
  }

  async list(f: { batch?: string; status?: RedemptionStatus; page: number; pageSize: number }) {
    const at = nowSeconds();
    const r = await this.codes.list({ batch: f.batch, status: f.status, at, offset: (f.page - 1) * f.pageSize, limit: f.pageSize });
    return { items: r.items.map((row) => ({ row, status: redemptionStatus(row, at) })), total: r.total, page: f.page, page_size: f.pageSize };
  }

  async batches(f: { page: number; pageSize: number }) {
    const r = await this.codes.batches(nowSeconds(), (f.page - 1) * f.pageSize, f.pageSize);
    return { ...r, page: f.page, page_size: f.pageSize };
  }
}

const tooManyAttempts = (wait: number) =>
  new GatewayError(429, 'too_many_attempts', 'Too many invalid redemption codes; try again later', { headers: { 'retry-after': String(wait) } });
