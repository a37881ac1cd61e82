/* Talking to a VCS: git fetches of one commit, which commits trigger runs, and the closed set of provider API operations. */
export * from "./git.js";
export * from "./fetch.js";
export * from "./work-dir.js";
export * from "./operations.js";
export * from "./client.js";
export { vcsStatusOf } from "./api-errors.js";
export * from "./triggers.js";
export * from "./webhook-delivery.js";
