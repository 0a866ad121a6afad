export * from './catalog';
export * from './config';
export * from './gate';
export * from './health';
export * from './relay';
export * from './router';
export * from './validate';
export * from './wiring';
