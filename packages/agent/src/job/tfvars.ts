import { DroverError, hasControlChars, terraformVariableNamePattern, type JobVariable } from "@drover/protocol";

/**
 * A file of the job's variables the agent writes beside the configuration. Its name is one
 * terraform never loads by itself (no `.auto.`, not terraform.tfvars): the plan names it with
 * `-var-file`, which terraform reads after the configuration's own terraform.tfvars and
 * *.auto.tfvars, so the workspace's and the run's variables win over those, as on HCP Terraform.
 * An auto-loaded name would lose to any of the configuration's that sorts after it.
 */
export interface TfvarsFile {
  name: string;
  content: string;
}

/**
 * The tfvars files of a job's terraform variables. String values go in one JSON file, where
 * they cannot be anything but strings. Each HCL value gets a file of its own holding the one line
 * `key = value`: HCL ends an assignment at a line break, so a value without one cannot assign
 * another variable, and an unbalanced value (`{`, `/*`) cannot swallow the next variable's
 * line either, since no other line follows in its file. Terraform refuses a value that is not a
 * single expression. The server gives a run's own variables after the workspace's, in place of
 * those of the same name, so no two files assign one variable.
 */
export function tfvarsFiles(variables: readonly JobVariable[]): TfvarsFile[] {
  const tf = variables.filter((v) => v.kind === "terraform");
  const strings = tf.filter((v) => !v.hcl);
  const files: TfvarsFile[] = [];
  if (strings.length > 0)
    files.push({
      name: "drover.tfvars.json",
      content: JSON.stringify(Object.fromEntries(strings.map((v) => [v.key, v.value])), null, 2),
    });
  for (const v of tf.filter((x) => x.hcl)) {
    // A name the server accepts; anything else must not reach a file name or an HCL line.
    if (!terraformVariableNamePattern.test(v.key))
      throw new DroverError("bad_request", `the variable key ${JSON.stringify(v.key)} is not valid`);
    // The server refuses these; an agent does not rely on that for what reaches terraform.
    // Tabs are HCL whitespace; any other control character could end the assignment's line.
    if (hasControlChars(v.value.replace(/\t/g, "")))
      throw new DroverError("bad_request", `the HCL variable ${v.key} holds a line break or control character`);
    files.push({ name: `drover-hcl-${v.key}.tfvars`, content: `${v.key} = ${v.value}\n` });
  }
  return files;
}

/** The plan's arguments naming `files`, in their order (a later file wins in terraform). */
export function varFileArgs(files: readonly TfvarsFile[]): string[] {
  // Relative to the working directory, where they are written and terraform runs, on every driver.
  return files.map((f) => `-var-file=${f.name}`);
}
