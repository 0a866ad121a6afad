export * from './config';
export * from './price-book';
export * from './quota';
export * from './usage-view';
export * from './journal';
