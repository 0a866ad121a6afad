export * from './schemas';
export * from './validate';
export * from './service';
export * from './registry';
export * from './tester';
export * from './header-policy';
