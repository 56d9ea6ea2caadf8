/** Types of the pm2 process file's exports (ecosystem.config.js), for the bench that reuses its Node flags. */
export declare const NODE_ARGS: string[];
export declare const apps: Record<string, unknown>[];
