// The API reference: Swagger UI over the service's own OpenAPI document (no validator, nothing external).
"use strict";

window.GP.onReady(function () {
  const box = document.getElementById("api-reference");
  if (!box || !window.SwaggerUIBundle) return;
  window.SwaggerUIBundle({
    url: box.getAttribute("data-spec-url"),
    domNode: box,
    deepLinking: false,   // deep links put a link inside each operation's button
    validatorUrl: null,
    defaultModelsExpandDepth: 0,
    docExpansion: "list",
    tryItOutEnabled: false,
  });
});
