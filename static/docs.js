// Starts Swagger UI on /docs from local files (no CDN, no inline script).
window.addEventListener("DOMContentLoaded", () => {
  const holder = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: holder.dataset.openapi,
    dom_id: "#swagger-ui",
    deepLinking: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
