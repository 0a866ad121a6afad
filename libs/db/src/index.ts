export * from './client';
export * as schema from './schema';
export * from './schema';
export * from './repos/users';
export * from './repos/sessions';
export * from './repos/ledger';
export * from './repos/prices';
export * from './repos/usage-logs';
