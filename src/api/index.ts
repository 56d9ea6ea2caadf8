/**
 * The REST surface: `buildApi(deps)` and its dependency type.
 */
export { buildApi, type ApiDeps } from './server';
export { ADMIN_PRINCIPAL } from './auth';
