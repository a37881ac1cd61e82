import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
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
  provisioner "local-exec" { command = "seq 1 200000" }
}
`,
      },
    );
    assert.equal((await tc.terraform(["init", "-input=false"], dir)).code, 0);
    const apply = await tc.terraform(["apply", "-auto-approve"], dir);
    assert.equal(apply.code, 0, apply.output.slice(-2000));
    const numbers = [...apply.output.matchAll(/\(local-exec\): (\d+)$/gm)].map((m) => Number(m[1]));
    assert.equal(numbers.length, 200_000);
    assert.ok(
      numbers.every((n, i) => n === i + 1),
      "in order, none lost or repeated",
    );
  });
});
