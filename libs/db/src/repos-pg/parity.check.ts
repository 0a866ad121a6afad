/**
 * Compile-time proof that every PostgreSQL repository offers what its SQLite twin does: the same
 * method names, every method async, the same results once awaited, and every argument list the
 * SQLite method accepts also accepted (the transaction handle of either dialect counts as one
 * "writer" type). `bun run typecheck` fails and names `repo.method` on any drift.
 * This file is only type-checked, never imported.
 */
import type { Equal } from '../schema-pg/parity.check';
import type { ApiKeysRepo } from '../repos/api-keys';
import type { ChannelsRepo } from '../repos/channels';
import type { GroupsRepo } from '../repos/groups';
import type { LedgerRepo } from '../repos/ledger';
import type { PricesRepo } from '../repos/prices';
import type { RealtimeSessionsRepo } from '../repos/realtime-sessions';
import type { RedemptionCodesRepo } from '../repos/redemption-codes';
import type { SecurityRepo } from '../repos/security';
import type { SessionsRepo } from '../repos/sessions';
import type { SettlementsRepo } from '../repos/settlements';
import type { DbWriter, TopupOrdersRepo } from '../repos/topup-orders';
import type { UsageLogsRepo } from '../repos/usage-logs';
import type { UsageStatsRepo } from '../repos/usage-stats';
import type { UsersRepo } from '../repos/users';
import type { WebhookEventsRepo } from '../repos/webhook-events';
import type * as Pg from './index';

/** Each SQLite repository beside its PostgreSQL twin. */
type Pairs = {
  apiKeys: [ApiKeysRepo, Pg.PgApiKeysRepo];
  channels: [ChannelsRepo, Pg.PgChannelsRepo];
  groups: [GroupsRepo, Pg.PgGroupsRepo];
  ledger: [LedgerRepo, Pg.PgLedgerRepo];
  prices: [PricesRepo, Pg.PgPricesRepo];
  realtimeSessions: [RealtimeSessionsRepo, Pg.PgRealtimeSessionsRepo];
  redemptionCodes: [RedemptionCodesRepo, Pg.PgRedemptionCodesRepo];
  security: [SecurityRepo, Pg.PgSecurityRepo];
  sessions: [SessionsRepo, Pg.PgSessionsRepo];
  settlements: [SettlementsRepo, Pg.PgSettlementsRepo];
  topupOrders: [TopupOrdersRepo, Pg.PgTopupOrdersRepo];
  usageLogs: [UsageLogsRepo, Pg.PgUsageLogsRepo];
  usageStats: [UsageStatsRepo, Pg.PgUsageStatsRepo];
  users: [UsersRepo, Pg.PgUsersRepo];
  webhookEvents: [WebhookEventsRepo, Pg.PgWebhookEventsRepo];
};

type Fn = (...args: any[]) => any;
type Methods<T> = { [K in keyof T as T[K] extends Fn ? K : never]: T[K] };

/**
 * Methods that return a query builder for EXPLAIN in benchmarks, not a result: a dialect's builder
 * type cannot equal the other's, so only their awaited rows are compared.
 */
type BuilderMethods = 'aggregateQuery' | 'latencyHistogramQuery' | 'exportPageQuery';

/** A transaction handle of either dialect, as an argument, reads as the same placeholder. */
type Norm<P extends unknown[]> = {
  [I in keyof P]: [NonNullable<P[I]>] extends [DbWriter] ? 'writer' : [NonNullable<P[I]>] extends [Pg.PgWriter] ? 'writer' : P[I];
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
    : `${R}.${K & string}: only in PostgreSQL`;
}[keyof S | keyof P];

/** Every mismatch across all repositories; `never` when they agree. */
export type RepoDrift = { [R in keyof Pairs]: MethodDiff<R, Methods<Pairs[R][0]>, Methods<Pairs[R][1]>> }[keyof Pairs];

// Fails to compile while RepoDrift is not `never`; the error names each drifting method.
export const repoDrift: [RepoDrift] extends [never] ? 'none' : `drift: ${RepoDrift}` = 'none';

// The detector itself must detect: a missing method, a sync method, a different result, narrower arguments.
type Expect<T extends true> = T;
export type DetectorSelfTest = [
  Expect<Equal<MethodDiff<'r', { a(): number }, {}>, 'r.a: missing in PostgreSQL'>>,
  Expect<Equal<MethodDiff<'r', {}, { a(): Promise<number> }>, 'r.a: only in PostgreSQL'>>,
  Expect<Equal<MethodDiff<'r', { a(): number }, { a(): number }>, 'r.a: not async'>>,
  Expect<Equal<MethodDiff<'r', { a(): number }, { a(): Promise<string> }>, 'r.a: result differs'>>,
  Expect<Equal<MethodDiff<'r', { a(x: string): number }, { a(x: 'k'): Promise<number> }>, 'r.a: arguments differ'>>,
  Expect<Equal<MethodDiff<'r', { a(x: string, tx?: DbWriter): number }, { a(x: string, tx?: Pg.PgWriter): Promise<number> }>, never>>,
  Expect<Equal<MethodDiff<'r', { a(x: string): number }, { a(x: string, tx?: Pg.PgWriter): Promise<number> }>, never>>,
];
