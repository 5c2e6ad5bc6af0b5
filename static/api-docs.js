// /api/docs: Swagger UI (vendored) on the app's own OpenAPI document. No inline script (CSP).
window.addEventListener("DOMContentLoaded", function () {
  var el = document.getElementById("swagger-ui");
  window.SwaggerUIBundle({ url: el.dataset.openapi, dom_id: "#swagger-ui", deepLinking: true });
});
