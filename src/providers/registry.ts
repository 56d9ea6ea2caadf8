/**
 * The provider registry step handlers receive (`EffectDeps.providers`): one
 * client per provider, sharing the effect timeout. Clients hold no state
 * between calls (each call builds its client from the ContributionRef), so
 * one registry serves every connection of every workspace.
 */
import { createGithubProvider } from './github';
import { createGitlabProvider } from './gitlab';
import type { ProviderRegistry } from './types';

export interface ProviderRegistryOptions {
  /** Per HTTP request. The process default is `AppConfig.effectTimeoutMs` (why 15 s: see src/app/config.ts). */
  timeoutMs: number;
}

export function createProviderRegistry(options: ProviderRegistryOptions): ProviderRegistry {
  if (!Number.isInteger(options.timeoutMs) || options.timeoutMs <= 0) {
    throw new Error(`provider timeoutMs must be a positive integer (got ${options.timeoutMs})`);
  }
  return {
    github: createGithubProvider({ timeoutMs: options.timeoutMs }),
    gitlab: createGitlabProvider({ timeoutMs: options.timeoutMs }),
  };
}
