import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { numberedLinesCommand, printedLines } from "../support/provisioner-lines.js";
import { startTerraformCloud, type TerraformCloud } from "../support/terraform-cloud.js";

/* A remote apply's log of 200,000 lines, streamed to the real terraform 1.11.4 through its cloud block. */

let tc: TerraformCloud;
before(async () => {
  tc = await startTerraformCloud();
  await tc.stack.startAgent("long-log-agent");
});
after(() => tc?.stop());

describe("a long apply log", () => {
  test("200,000 lines reach terraform whole and in order", { timeout: 900_000 }, async () => {
    const dir = tc.config(
      "long-log",
      { name: "long-log" },
      {
        "main.tf": `
resource "terraform_data" "long" {
  provisioner "local-exec" { command = "${numberedLinesCommand(200_000)}" }
}
`,
      },
    );
    assert.equal((await tc.terraform(["init", "-input=false"], dir)).code, 0);
    const apply = await tc.terraform(["apply", "-auto-approve"], dir);
    assert.equal(apply.code, 0, apply.output.slice(-2000));
    // printedLines joins the pieces terraform itself splits a line into on a busy machine.
    const numbers = printedLines(apply.output);
    // On failure, say where the sequence breaks and show the output there, not 14 MB of it.
    const broken = numbers.findIndex((n, i) => n !== i + 1);
    const at = broken === -1 ? numbers.length : broken;
    const around = apply.output.indexOf(`line ${String(at).padStart(6, "0")}`);
    const context = around === -1 ? apply.output.slice(-2000) : apply.output.slice(around, around + 2000);
    assert.equal(broken, -1, `the lines break after ${at}, where the output reads:\n${context}`);
    assert.equal(numbers.length, 200_000, `${numbers.length} lines arrived; the output ends:\n${context}`);
  });
});
