export * from './errors';
export * from './http';
export * from './ids';
export * from './money';
export * from './secret-box';
export * from './clock';
export * from './rate-window';
export * from './events';
