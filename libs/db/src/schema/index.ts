export * from './identity';
export * from './channels';
export * from './billing';
export * from './payments';
export * from './realtime';
export * from './budgets';
