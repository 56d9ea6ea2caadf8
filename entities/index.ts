// Replaced by the schema work: every entity class, one file per table.
export const ALL_ENTITIES: Function[] = [];
