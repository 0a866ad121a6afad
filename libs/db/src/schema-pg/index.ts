/**
 * PostgreSQL schema: the same exports as ../schema (table objects with the same property and
 * column names), so repositories can be written once against either. parity.check.ts makes the
 * typecheck fail when the two drift apart.
 */
export * from './identity';
export * from './channels';
export * from './billing';
export * from './payments';
export * from './realtime';
export * from './budgets';
