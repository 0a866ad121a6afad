export * from './period';
export * from './thresholds';
export * from './book';
export * from './service';
export * from './webhook-config';
export * from './alert-webhook';
export * from './outbox-retention';
