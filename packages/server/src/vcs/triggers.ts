// The VCS agents decide the same way before they upload, so the rule lives in @drover/vcs.
export { commitTriggers, globPattern } from "@drover/vcs";
