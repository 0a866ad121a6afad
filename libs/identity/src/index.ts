export * from './passwords';
export * from './principal';
export * from './login';
export * from './sessions';
export * from './bootstrap';
export * from './views';
