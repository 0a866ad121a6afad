/**
 * Budget periods are calendar windows in UTC: a daily budget is the calendar day 00:00–24:00 UTC, a
 * monthly one the calendar month. Every node and every operator reads the same boundaries, whatever
 * their local time zone. A charge belongs to the period of its settlement time.
 */
export const PERIODS = ['daily', 'monthly'] as const;
export type BudgetPeriod = (typeof PERIODS)[number];

const pad = (n: number) => String(n).padStart(2, '0');

/** `YYYY-MM-DD` (daily) or `YYYY-MM` (monthly) of `ms`; keys of one period kind sort like their times. */
export function periodKey(period: BudgetPeriod, ms: number): string {
  const d = new Date(ms);
  const month = `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}`;
  return period === 'daily' ? `${month}-${pad(d.getUTCDate())}` : month;
}

/** Start of the period containing `ms` (Unix ms). */
export function periodStart(period: BudgetPeriod, ms: number): number {
  const d = new Date(ms);
  return period === 'daily' ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate()) : Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), 1);
}

/** When the period named by `key` (a periodKey of `period`) ends (Unix ms). */
export function periodEndOfKey(period: BudgetPeriod, key: string): number {
  return periodEnd(period, Date.parse(`${period === 'daily' ? key : `${key}-01`}T00:00:00Z`));
}

/** When the period containing `ms` ends and the next one starts (Unix ms). */
export function periodEnd(period: BudgetPeriod, ms: number): number {
  const d = new Date(ms);
  return period === 'daily' ? Date.UTC(d.getUTCFullYear(), d.getUTCMonth(), d.getUTCDate() + 1) : Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
}
