import { DroverError, hasControlChars, terraformVariableNamePattern, type JobVariable } from "@drover/protocol";

/** A file the agent writes beside the configuration for terraform to load automatically. */
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
 * single expression.
 */
export function tfvarsFiles(variables: readonly JobVariable[]): TfvarsFile[] {
  const tf = variables.filter((v) => v.kind === "terraform");
  const strings = tf.filter((v) => !v.hcl);
  const files: TfvarsFile[] = [];
  if (strings.length > 0)
    files.push({
      name: "drover.auto.tfvars.json",
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
    files.push({ name: `drover-hcl-${v.key}.auto.tfvars`, content: `${v.key} = ${v.value}\n` });
  }
  return files;
}
