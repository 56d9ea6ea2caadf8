// Replaced by the schema work: every migration class, in order.
export const ALL_MIGRATIONS: Function[] = [];
