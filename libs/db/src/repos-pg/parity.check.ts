/**
 * Compile-time proof that every PostgreSQL repository offers what its storage interface (the one the
 * services take, implemented by the SQLite repositories) asks: every method, async, the same results
 * once awaited, and every argument list the interface accepts also accepted. PostgreSQL classes may
 * have more (methods that join a caller's transaction through a trailing `tx`). `bun run typecheck`
 * fails and names `repo.method` on any drift. The synchronous SettlementSink is SQLite's alone: the
 * PostgreSQL mode settles by group commit.
 * This file is only type-checked, never imported.
 */
import type { Equal } from '../schema-pg/parity.check';
import type { ApiKeysStore } from '../repos/api-keys';
import type { AlertOutboxRepo, BudgetChargesRepo, BudgetsRepo } from '../repos/budgets';
import type { ChannelsStore } from '../repos/channels';
import type { GroupsStore } from '../repos/groups';
import type { LedgerStore } from '../repos/ledger';
import type { PricesStore } from '../repos/prices';
import type { RealtimeSessionsStore } from '../repos/realtime-sessions';
import type { RedemptionCodesStore } from '../repos/redemption-codes';
import type { SecurityStore } from '../repos/security';
import type { SessionsStore } from '../repos/sessions';
import type { TopupOrdersStore } from '../repos/topup-orders';
import type { UsageLogsStore } from '../repos/usage-logs';
import type { UsageStatsStore } from '../repos/usage-stats';
import type { UsersStore } from '../repos/users';
import type { WebhookEventsStore } from '../repos/webhook-events';
import type * as Pg from './index';

/** Each storage interface beside its PostgreSQL implementation. */
type Pairs = {
  apiKeys: [ApiKeysStore, Pg.PgApiKeysRepo];
  // Budgets have no async interface yet (SQLite charges them in the synchronous settlement batch): the
  // SQLite classes stand in for it, so the PostgreSQL twins keep their names, arguments and results.
  budgets: [BudgetsRepo, Pg.PgBudgetsRepo];
  budgetCharges: [BudgetChargesRepo, Pg.PgBudgetChargesRepo];
  alertOutbox: [AlertOutboxRepo, Pg.PgAlertOutboxRepo];
  channels: [ChannelsStore, Pg.PgChannelsRepo];
  groups: [GroupsStore, Pg.PgGroupsRepo];
  ledger: [LedgerStore, Pg.PgLedgerRepo];
  prices: [PricesStore, Pg.PgPricesRepo];
  realtimeSessions: [RealtimeSessionsStore, Pg.PgRealtimeSessionsRepo];
  redemptionCodes: [RedemptionCodesStore, Pg.PgRedemptionCodesRepo];
  security: [SecurityStore, Pg.PgSecurityRepo];
  sessions: [SessionsStore, Pg.PgSessionsRepo];
  topupOrders: [TopupOrdersStore, Pg.PgTopupOrdersRepo];
  usageLogs: [UsageLogsStore, Pg.PgUsageLogsRepo];
  usageStats: [UsageStatsStore, Pg.PgUsageStatsRepo];
  users: [UsersStore, Pg.PgUsersRepo];
  webhookEvents: [WebhookEventsStore, Pg.PgWebhookEventsRepo];
};

type Fn = (...args: any[]) => any;
type Methods<T> = { [K in keyof T as T[K] extends Fn ? K : never]: T[K] };

/**
 * Methods that return a query builder for EXPLAIN in benchmarks, not a result: a dialect's builder
 * type cannot equal the other's, so only their awaited rows are compared.
 */
type BuilderMethods = 'aggregateQuery' | 'latencyHistogramQuery' | 'exportPageQuery';

/** A PostgreSQL transaction handle, as an argument, reads as a placeholder. */
type Norm<P extends unknown[]> = {
  [I in keyof P]: [NonNullable<P[I]>] extends [Pg.PgWriter] ? 'writer' : P[I];
};

type MethodDiff<R extends string, S, P> = {
  [K in keyof S | keyof P]: K extends keyof S
    ? K extends keyof P
      ? S[K] extends Fn
        ? P[K] extends Fn
          ? Equal<Awaited<ReturnType<S[K]>>, Awaited<ReturnType<P[K]>>> extends false
            ? `${R}.${K & string}: result differs`
            : K extends BuilderMethods
              ? never
              : ReturnType<P[K]> extends Promise<unknown>
                ? Norm<Parameters<S[K]>> extends Norm<Parameters<P[K]>> ? never : `${R}.${K & string}: arguments differ`
                : `${R}.${K & string}: not async`
          : never
        : never
      : `${R}.${K & string}: missing in PostgreSQL`
    : never;
}[keyof S | keyof P];

/** Every mismatch across all repositories; `never` when they agree. */
export type RepoDrift = { [R in keyof Pairs]: MethodDiff<R, Methods<Pairs[R][0]>, Methods<Pairs[R][1]>> }[keyof Pairs];

// Fails to compile while RepoDrift is not `never`; the error names each drifting method.
export const repoDrift: [RepoDrift] extends [never] ? 'none' : `drift: ${RepoDrift}` = 'none';

// The detector itself must detect: a missing method, a sync method, a different result, narrower arguments.
type Expect<T extends true> = T;
export type DetectorSelfTest = [
  Expect<Equal<MethodDiff<'r', { a(): number }, {}>, 'r.a: missing in PostgreSQL'>>,
  Expect<Equal<MethodDiff<'r', {}, { a(): Promise<number> }>, never>>,
  Expect<Equal<MethodDiff<'r', { a(): number }, { a(): number }>, 'r.a: not async'>>,
  Expect<Equal<MethodDiff<'r', { a(): number }, { a(): Promise<string> }>, 'r.a: result differs'>>,
  Expect<Equal<MethodDiff<'r', { a(x: string): number }, { a(x: 'k'): Promise<number> }>, 'r.a: arguments differ'>>,
  Expect<Equal<MethodDiff<'r', { a(x: string): number }, { a(x: string, tx?: Pg.PgWriter): Promise<number> }>, never>>,
];
