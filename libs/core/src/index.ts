export * from './errors';
export * from './http';
export * from './ids';
export * from './money';
