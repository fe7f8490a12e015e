SELECT reason, count(*) AS n_rows
FROM {schema}.quarantine
GROUP BY reason
ORDER BY reason;
