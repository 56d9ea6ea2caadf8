/** The closed JSON Schemas of every canonical document (see each file's header). */
export * from './fragments';
export * from './step-requests';
export * from './observations';
export * from './evidence';
export * from './bindings';
