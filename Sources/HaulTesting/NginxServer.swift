import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A real nginx on a free loopback port, serving a folder, for integration tests.
///
/// It runs in the foreground (`daemon off`) as a child process with its pid file, logs and temp paths in a private
/// folder, and is stopped by its PID when the scope ends, whatever happens inside it.
public struct NginxServer: Sendable {
    /// The folder nginx serves at `/`.
    public let root: URL
    /// The port it listens on, on 127.0.0.1.
    public let port: Int

    /// The nginx executable, if one is installed.
    public static var executable: String? {
        ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/opt/homebrew/bin/nginx", "/usr/local/bin/nginx"]
            .first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// The URL of a path on this server.
    public func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(self.port)\(path)")! }

    /// Starts nginx serving a new empty folder (fill it through `root`), runs `body`, and stops nginx.
    ///
    /// - Parameter extraLocationConfig: directives added to `location /` (for example `limit_rate 100k;`).
    public static func withServer<Result>(
        extraLocationConfig: String = "",
        _ body: (NginxServer) async throws -> Result
    ) async throws -> Result {
        guard let executable = self.executable else { throw NginxError("nginx is not installed") }
        let base = FileManager.default.temporaryDirectory.appending(path: "haul-nginx-\(UUID().uuidString)")
        let root = base.appending(path: "www")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: base) }

        var lastError: any Error = NginxError("nginx did not start")
        for _ in 0..<5 {
            let port = try await FaultInjectingServer.refusingPort()
            let config = """
                \(getuid() == 0 ? "user root;" : "")
                worker_processes 1;
                pid \(base.path)/nginx.pid;
                error_log \(base.path)/error.log;
                events { worker_connections 256; }
                http {
                    access_log off;
                    client_body_temp_path \(base.path)/client_body;
                    proxy_temp_path \(base.path)/proxy;
                    fastcgi_temp_path \(base.path)/fastcgi;
                    uwsgi_temp_path \(base.path)/uwsgi;
                    scgi_temp_path \(base.path)/scgi;
                    server {
                        listen 127.0.0.1:\(port);
                        root \(root.path);
                        location / { \(extraLocationConfig) }
                    }
                }
                """
            let configPath = base.appending(path: "nginx.conf")
            try config.write(to: configPath, atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(filePath: executable)
            process.arguments = [
                "-p", base.path, "-e", base.appending(path: "error.log").path, "-c", configPath.path, "-g",
                "daemon off;",
            ]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            defer {
                if process.isRunning {
                    process.terminate()
                    // Not `waitUntilExit()`: on Linux it spins a run loop for the news of the exit, and off the thread
                    // that started the process it can wait for ever. nginx ends within milliseconds of SIGTERM.
                    let deadline = ContinuousClock.now + .seconds(5)
                    while process.isRunning, ContinuousClock.now < deadline { usleep(10_000) }
                }
            }
            if await self.waitForPort(port, while: { process.isRunning }) {
                return try await body(NginxServer(root: root, port: port))
            }
            let log = (try? String(contentsOf: base.appending(path: "error.log"), encoding: .utf8)) ?? ""
            lastError = NginxError("nginx did not listen on port \(port): \(log)")
        }
        throw lastError
    }

    /// Waits up to 10 seconds for a connection to the port to succeed.
    private static func waitForPort(_ port: Int, while isAlive: () -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline, isAlive() {
            if let channel = try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: port).get()
            {
                try? await channel.close()
                return true
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return false
    }
}

/// nginx could not be started.
public struct NginxError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
