export * from './config';
export * from './price-book';
export * from './quota';
export * from './usage-view';
export * from './journal';
export * from './usage-guard';
export * from './worst-case';
export * from './holds/port';
export { MemoryHoldStore } from './holds/memory';
