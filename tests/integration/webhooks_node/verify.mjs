// Reads deliveries as JSON lines on stdin ({"secret", "headers", "body"}) and prints, for each, "ok" or
// "fail: <why>", verified with the standardwebhooks npm package: what a TypeScript receiver runs.
import { Webhook } from "standardwebhooks";
import { createInterface } from "node:readline";

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const { secret, headers, body } = JSON.parse(line);
  try {
    new Webhook(secret).verify(body, headers);
    console.log("ok");
  } catch (error) {
    console.log(`fail: ${error.message}`);
  }
}
