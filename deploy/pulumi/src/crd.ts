import { readFileSync } from "node:fs";
import type * as k8s from "@pulumi/kubernetes";
import { parse } from "yaml";

// The package carries a copy of deploy/kubernetes/agenttasks.drover.dev.yaml in crds/ (written by
// scripts/chart-copies.mjs, shipped through "files"), so the component installs the very file
// the charts install.

type CrdObject = {
  metadata: k8s.types.input.meta.v1.ObjectMeta;
  spec: k8s.types.input.apiextensions.v1.CustomResourceDefinitionSpec;
};

/** The AgentTask CRD (drover.dev/v1alpha1). */
export const agentTaskCrd = parse(
  readFileSync(new URL("../../crds/agenttasks.drover.dev.yaml", import.meta.url), "utf8"),
) as CrdObject;
